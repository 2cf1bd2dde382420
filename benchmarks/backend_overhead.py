"""Round time, peak memory and end-to-end time of the Ray backend against the local backend.

FedAvg on digits (MLP 64→64→10, H = 5 local steps, batch 32, every worker every round), a
star of 16 and 64 workers around the server, 20 rounds. Three ways to run it:

- ``local``: every client in the driver process;
- ``ray auto``: ``ray.clients_per_actor: auto`` (the default: one actor per CPU);
- ``ray 8/actor``: 8 clients per actor whatever the machine (the former default).

Each run is a fresh ``python -c`` subprocess, so its peak memory is its own and its
end-to-end time includes the interpreter, the imports and Ray's start. Memory is summed
over the whole process tree (driver, Ray's daemons and actors, sampled every 0.1 s) two
ways: resident memory (RSS, counting a page shared by k processes k times) and
proportional set size (PSS, each process charged 1/k of a shared page). Round 0 (warm-up)
is left out of the median round time. The runs alternate, ``--repeats`` times; a ratio
printed is the median of the per-repeat ratios, so a burst of load from elsewhere on the
machine skews one repeat at most.

The reference figures are Flower 1.41's ``run_simulation`` (Ray backend, 2 actors) on the
same task and machine: 0.208 / 0.44–0.53 s per round and 1 976 / 1 981 MB peak RSS at
16 / 64 workers, 15–19 s end to end for 20 rounds.

    python benchmarks/backend_overhead.py [--rounds 20] [--workers 16 64] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

FLOWER_PEAK_MB = {16: 1976, 64: 1981}
FLOWER_ROUND_S = {16: 0.208, 64: 0.44}
FLOWER_E2E_S = 17.0
MODES = {"local": ("local", None), "ray auto": ("ray", "auto"), "ray 8/actor": ("ray", 8)}


def one(mode: str, workers: int, rounds: int) -> dict:
    """One run in this (fresh) process; what it measured, as a dict."""
    import tempfile

    from proc_memory import PeakSampler

    from decent.engine.config import from_dict
    from decent.run.runner import run

    backend, per_actor = MODES[mode]
    with tempfile.TemporaryDirectory() as out, PeakSampler(0.1, pss=True) as mem:
        cfg = from_dict({
            "name": "bench", "rounds": rounds, "backend": backend,
            "topology": {"name": "star", "n": workers + 1},
            "strategy": {"name": "fedavg", "local_steps": 5, "batch_size": 32, "lr": 0.1},
            "eval": {"every": 0, "per_client": False},
            "ray": {"clients_per_actor": per_actor or "auto"},
            "tracking": {"out_dir": out, "progress": False, "wandb": {"mode": "disabled"}},
        })
        result = run(cfg)
    times = [r["round_wall_s"] for r in result.rows[1:]]
    return {"round_s": statistics.median(times), "rss_mb": mem.peak, "pss_mb": mem.peak_pss,
            "actors": result.summary.get("ray_actors", 0)}


def measure(mode: str, workers: int, rounds: int) -> dict:
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, __file__, "--one", mode, str(workers), "--rounds", str(rounds)],
        check=True, capture_output=True, text=True,
    ).stdout
    got = json.loads(out.strip().splitlines()[-1])
    got["e2e_s"] = time.perf_counter() - started
    return got


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--workers", type=int, nargs="+", default=[16, 64])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--one", nargs=2, metavar=("MODE", "WORKERS"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(json.dumps(one(args.one[0], int(args.one[1]), args.rounds)))
        return
    runs: dict[tuple[str, int], list[dict]] = {}
    for _ in range(args.repeats):
        for workers in args.workers:
            for mode in MODES:
                runs.setdefault((mode, workers), []).append(measure(mode, workers, args.rounds))
    med = statistics.median
    print(f"FedAvg, digits MLP, H=5, batch 32, {args.rounds} rounds, {os.cpu_count()} CPUs; "
          f"medians of {args.repeats} alternating repeats")
    print(f"{'workers':>7} {'mode':>12} {'actors':>6} {'s/round':>8} {'÷local':>7} "
          f"{'RSS MB':>7} {'PSS MB':>7} {'RSS÷Flower':>10} {'e2e s':>6} {'e2e÷Flower':>10}")
    for workers in args.workers:
        local = runs["local", workers]
        for mode in MODES:
            got = runs[mode, workers]
            ratio = med(g["round_s"] / lo["round_s"] for g, lo in zip(got, local, strict=True))
            rss = med(g["rss_mb"] for g in got)
            e2e = med(g["e2e_s"] for g in got)
            print(f"{workers:>7} {mode:>12} {med(g['actors'] for g in got):>6} "
                  f"{med(g['round_s'] for g in got):>8.4f} {ratio:>7.2f} {rss:>7.0f} "
                  f"{med(g['pss_mb'] for g in got):>7.0f} "
                  f"{rss / FLOWER_PEAK_MB[workers] if workers in FLOWER_PEAK_MB else 0:>10.2f} "
                  f"{e2e:>6.1f} {e2e / FLOWER_E2E_S:>10.2f}")


if __name__ == "__main__":
    main()
