"""Round time and peak memory of the Ray backend against the local backend.

DSGD on a ring of digits clients (MLP 64→64→10, 5 local steps, batch 8), 16 and 64
clients, 8 clients per actor on Ray. Each configuration runs in a fresh subprocess so its
peak memory (resident memory of the whole process tree: driver, Ray's daemons and actors,
sampled every 0.2 s) is its own; round 0 (warm-up) is left out of the median round time.
Local and Ray runs alternate, ``--repeats`` times; the ratio printed is the median of the
per-repeat ratios, so a burst of load from elsewhere on the machine skews one pair at most.

    python benchmarks/backend_overhead.py [--rounds 15] [--clients 16 64] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def one(backend: str, clients: int, rounds: int, per_actor: int) -> dict:
    from proc_memory import PeakSampler

    from decent.platform.config import from_dict
    from decent.platform.runner import run

    with tempfile.TemporaryDirectory() as out, PeakSampler() as mem:
        cfg = from_dict({
            "name": f"bench-{backend}-{clients}", "rounds": rounds, "backend": backend,
            "topology": {"name": "ring", "n": clients},
            "strategy": {"name": "dsgd", "local_steps": 5, "batch_size": 8, "lr": 0.1},
            "eval": {"every": 0, "per_client": False},
            "ray": {"clients_per_actor": per_actor},
            "tracking": {"out_dir": out, "progress": False, "wandb": {"mode": "disabled"}},
        })
        result = run(cfg)
    times = [r["wall_s"] for r in result.rows[1:]]
    return {"backend": backend, "clients": clients, "round_s": statistics.median(times),
            "peak_mb": mem.peak, "bytes_per_round": result.rows[0]["bytes"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--clients", type=int, nargs="+", default=[16, 64])
    p.add_argument("--clients-per-actor", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--one", nargs=2, metavar=("BACKEND", "CLIENTS"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(json.dumps(one(args.one[0], int(args.one[1]), args.rounds,
                             args.clients_per_actor)))
        return
    results: dict[tuple[str, int], list[dict]] = {}
    for _ in range(args.repeats):
        for clients in args.clients:
            for backend in ("local", "ray"):
                out = subprocess.run(
                    [sys.executable, __file__, "--one", backend, str(clients), "--rounds",
                     str(args.rounds), "--clients-per-actor", str(args.clients_per_actor)],
                    check=True, capture_output=True, text=True,
                ).stdout
                results.setdefault((backend, clients), []).append(
                    json.loads(out.strip().splitlines()[-1]))
    med = statistics.median
    print(f"DSGD ring, digits MLP, {args.rounds} rounds, {args.clients_per_actor} clients/actor, "
          f"medians of {args.repeats} alternating repeats")
    print(f"{'clients':>7} {'local s/round':>14} {'ray s/round':>12} {'ray/local':>10} "
          f"{'local peak MB':>14} {'ray peak MB':>12} {'actors':>7}")
    for clients in args.clients:
        loc, ray_ = results["local", clients], results["ray", clients]
        ratio = med(r["round_s"] / lo["round_s"] for r, lo in zip(ray_, loc, strict=True))
        actors = -(-clients // args.clients_per_actor)
        print(f"{clients:>7} {med(x['round_s'] for x in loc):>14.4f} "
              f"{med(x['round_s'] for x in ray_):>12.4f} {ratio:>10.2f} "
              f"{med(x['peak_mb'] for x in loc):>14.0f} {med(x['peak_mb'] for x in ray_):>12.0f} "
              f"{actors:>7}")

if __name__ == "__main__":
    main()
