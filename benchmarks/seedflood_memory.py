"""Peak memory of SeedFlood (SubCGE, rank 64) with many SmolLM2-135M clients on one machine.

Clients hosted in one process share SmolLM2's frozen weights; each holds only its r×r
buffers (211 2-D layers × 64 × 64 floats = 3.5 MB; 210 with layers: linear) and its
1-D tensors (0.14 MB).
Naively 128 replicas would need 128 × 540 MB = 69 GB. Each configuration runs a few
iterations of SeedFlood on Rotten Tomatoes (batch 2, short prompts: memory, not accuracy)
in a fresh subprocess; the peak memory of its whole process tree (driver, Ray daemons and
actors) is sampled every 0.2 s, both as resident memory (RSS: a page shared by k processes
counts k times, as the object store's shared frozen weights do) and as proportional set
size (PSS: each process charged 1/k of a shared page, the machine's real footprint). On
Ray the actors are sized to the machine (``clients_per_actor: auto``) and map the frozen
weights from one copy in the object store; the ratio printed is Ray's peak over the local
backend's for the same number of clients.

    python benchmarks/seedflood_memory.py [--clients 16 128] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

MODEL_MB = 134_515_008 * 4 / 2**20  # SmolLM2-135M in float32


def one(clients: int, rounds: int, backend: str, per_actor: int | str) -> dict:
    from proc_memory import PeakSampler

    from decent.engine.config import from_dict
    from decent.run.runner import run

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as out, PeakSampler(pss=True) as mem:
        cfg = from_dict({
            "name": f"mem-{clients}", "rounds": rounds, "backend": backend,
            "topology": {"name": "meshgrid", "n": clients},
            "strategy": {"name": "seedflood", "lr": 1e-5, "batch_size": 2, "rank": 64},
            "task": {"name": "rotten_tomatoes", "num_train": max(256, 2 * clients),
                     "num_val": 0, "num_test": 8, "max_length": 32, "eval_batch_size": 8},
            "model": {"name": "causal_lm", "path": "smollm2-135m"},
            "eval": {"every": 0, "per_client": False},
            "ray": {"clients_per_actor": per_actor},
            "tracking": {"out_dir": out, "progress": False, "wandb": {"mode": "disabled"}},
        })
        result = run(cfg)
    return {"clients": clients, "backend": backend, "peak_mb": mem.peak,
            "peak_pss_mb": mem.peak_pss, "actors": result.summary.get("ray_actors", 0),
            "bytes_total": result.rows[-1]["bytes_total"], "wall_s": time.perf_counter() - t0}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, nargs="+", default=[16, 128])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--backends", nargs="+", default=["local", "ray"])
    p.add_argument("--clients-per-actor", default="auto")
    p.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        per_actor = args.clients_per_actor
        print(json.dumps(one(int(args.one[1]), args.rounds, args.one[0],
                             per_actor if per_actor == "auto" else int(per_actor))))
        return
    print(f"SeedFlood/SubCGE r=64 on SmolLM2-135M ({MODEL_MB:.0f} MB in fp32), meshgrid, "
          f"{args.rounds} iterations, clients_per_actor {args.clients_per_actor} on Ray")
    print(f"{'clients':>7} {'backend':>7} {'actors':>6} {'RSS MB':>7} {'PSS MB':>7} "
          f"{'naive MB':>9} {'RSS÷local':>9} {'PSS÷local':>9} {'wall s':>7}")
    for clients in args.clients:
        local: dict | None = None
        for backend in args.backends:
            out = subprocess.run([sys.executable, __file__, "--one", backend, str(clients),
                                  "--rounds", str(args.rounds), "--clients-per-actor",
                                  str(args.clients_per_actor)],
                                 check=True, capture_output=True, text=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            local = r if backend == "local" else local
            ratio = (f"{r['peak_mb'] / local['peak_mb']:>9.2f} "
                     f"{r['peak_pss_mb'] / local['peak_pss_mb']:>9.2f}") if local else \
                f"{'':>9} {'':>9}"
            print(f"{clients:>7} {backend:>7} {r['actors']:>6} {r['peak_mb']:>7.0f} "
                  f"{r['peak_pss_mb']:>7.0f} {clients * MODEL_MB:>9.0f} {ratio} "
                  f"{r['wall_s']:>7.0f}")


if __name__ == "__main__":
    main()
