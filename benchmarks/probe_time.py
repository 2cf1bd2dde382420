"""The memory probe's time on the LoRA run that stalled before it (SmolLM2-135M, LoRA,
16 clients in batched mode, 4 quarter-GPU actors, 5 local steps), as ``decent run`` takes
it before any actor starts: the config loaded, the plan built, then ``probe_apart`` in its
subprocess. The probe builds clients 0 and n−1 once on the CPU, computes what shapes give
and measures one batch's activations in one forward: no training step, no padded chunk.

The figure the layout plans with is printed beside the time. SST-2 comes from
``--data-dir`` (default ``../shared/data/sst2``: GLUE's files); the config is the one the
issue ran, with ``model.lora.dropout=0`` (batched clients refuse dropout).

    python benchmarks/probe_time.py [--data-dir ../shared/data/sst2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OVERRIDES = ["topology.n=16", "task.name=sst2", "task.num_train=1024",
             "strategy.local_steps=5", "execution.mode=batched", "backend=ray",
             "ray.num_gpus_per_actor=0.25", "ray.clients_per_actor=4", "device=cuda",
             "model.lora.dropout=0.0"]


def main() -> None:
    from decent.backends.ray.memory_plan import probe_apart
    from decent.engine.config import load_config
    from decent.engine.plan import build_plan

    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data" / "sst2"))
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cfg = load_config(ROOT / "experiments/tasks/rotten_tomatoes_smollm2_lora.yaml",
                      [*OVERRIDES, f"task.data_dir={args.data_dir}"])
    plan = build_plan(cfg)
    times, footprint = [], None
    for _ in range(args.repeats):
        began = time.perf_counter()
        footprint = probe_apart(cfg, plan)
        times.append(time.perf_counter() - began)
    print(f"probe of {cfg.model.name} ({cfg.n} clients, batched, device={cfg.device}): "
          f"median {statistics.median(times):.1f} s over {len(times)} "
          f"({', '.join(f'{t:.1f}' for t in times)})")
    print(f"footprint: {footprint}")


if __name__ == "__main__":
    main()
