"""Checkpoint size and write time for SmolLM2-135M clients.

* LoRA-DSGD (rank 8 on q_proj/v_proj, AdamW): each client stores its adapters and their
  AdamW moments; the frozen base is rebuilt from the config and not stored.
* SeedFlood/SubCGE (rank 64, refresh every 100 iterations): each client stores its r×r
  buffers and 1-D tensors; the process stores the shared weights that refreshes fold into,
  once for all clients.

Each configuration is built on the local backend, runs --rounds rounds (0: the state right
after start, same shapes as later), then one checkpoint is written; the time is the median
of --repeats writes (capturing the state and writing the files).

    python benchmarks/checkpoint_cost.py [--lora-clients 8] [--subcge-clients 128]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def measure(cfg_dict: dict, rounds: int, repeats: int) -> tuple[float, float, float, float]:
    from decent.backends.local import local_engine
    from decent.engine.config import from_dict
    from decent.run import checkpoint

    cfg = from_dict(cfg_dict)
    backend = local_engine(cfg)
    for r in range(rounds):
        backend.run_round(r)
    times = []
    with tempfile.TemporaryDirectory() as out:
        run_dir = Path(out)
        for _ in range(repeats):
            t0 = time.perf_counter()
            checkpoint.write(run_dir, rounds, backend.save_state(), {})
            times.append(time.perf_counter() - t0)
        folder = run_dir / f"checkpoint-{rounds:06d}"
        clients = sum(p.stat().st_size for p in (folder / "clients").glob("*.pt"))
        process = (folder / "process.pt").stat().st_size
        total = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    return statistics.median(times), total / 2**20, clients / cfg.n / 2**20, process / 2**20


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lora-clients", type=int, default=8)
    p.add_argument("--subcge-clients", type=int, default=128)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    task = {"name": "rotten_tomatoes", "num_train": 256, "num_val": 0, "num_test": 8,
            "max_length": 32, "eval_batch_size": 8}
    common = {"eval": {"every": 0, "per_client": False},
              "tracking": {"out_dir": tempfile.mkdtemp(), "progress": False,
                           "wandb": {"mode": "disabled"}}}
    rows = []
    lora = {"name": "lora", "rounds": args.rounds,
            "topology": {"name": "ring", "n": args.lora_clients},
            "strategy": {"name": "dsgd", "optimizer": "adamw", "lr": 1e-4, "local_steps": 1,
                         "batch_size": 2},
            "task": task, "model": {"name": "causal_lm", "lora": {"enabled": True}}, **common}
    rows.append(("LoRA-DSGD", args.lora_clients, args.rounds,
                 *measure(lora, args.rounds, args.repeats)))
    subcge = {"name": "subcge", "rounds": args.rounds,
              "topology": {"name": "meshgrid", "n": args.subcge_clients},
              "strategy": {"name": "seedflood", "batch_size": 2, "rank": 64,
                           "refresh_every": 100},
              "task": task, "model": {"name": "causal_lm"}, **common}
    rows.append(("SeedFlood/SubCGE", args.subcge_clients, args.rounds,
                 *measure(subcge, args.rounds, args.repeats)))
    print(f"SmolLM2-135M checkpoints, median of {args.repeats} writes")
    print(f"{'method':<17} {'clients':>7} {'rounds':>6} {'write s':>8} {'total MB':>9} "
          f"{'MB/client':>10} {'shared MB':>10}")
    for name, n, rounds, seconds, total, per_client, shared in rows:
        print(f"{name:<17} {n:>7} {rounds:>6} {seconds:>8.2f} {total:>9.1f} "
              f"{per_client:>10.2f} {shared:>10.1f}")


if __name__ == "__main__":
    main()
