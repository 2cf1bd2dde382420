"""SeedFlood SubCGE at 128 and 1 024 clients through ``decent run``: one batched process,
the tiny Llama, a random 4-regular graph (diameter 6 at 128, 8 at 1 024: full flooding
makes D sends an iteration), 2 iterations. Per size: seconds per iteration (the median
of the rows' ``round_wall_s``), the run's peak resident memory (its own process), the
bytes and messages of an iteration; then how each grows from 128 to 1 024 as an
exponent (ratio = 8^e). The bytes grow as n² by the protocol (n updates cross every
edge); the simulation's time and memory must not.

    python benchmarks/seedflood_scale.py [--sizes 128 1024]
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml


def config(n: int, out: Path) -> dict:
    return {"name": f"seedflood-{n}", "seed": 0, "rounds": 2,
            "topology": {"name": "random_regular", "n": n, "degree": 4},
            "strategy": {"name": "seedflood", "estimator": "subcge", "rank": 8,
                         "lr": 1e-4, "eps": 1e-3, "batch_size": 4},
            "task": {"name": "rotten_tomatoes", "num_train": 8 * n, "num_val": 0,
                     "num_test": 16, "max_length": 64, "eval_batch_size": 16},
            "model": {"name": "causal_lm", "path": "tiny-llama"},
            "execution": {"mode": "batched"},
            "eval": {"every": 0, "per_client": False},
            "tracking": {"out_dir": str(out), "progress": False,
                         "wandb": {"mode": "disabled"}}}


def measure(n: int, tmp: Path) -> dict:
    path = tmp / f"{n}.yaml"
    path.write_text(yaml.safe_dump(config(n, tmp / f"runs-{n}")))
    # each size in a process of its own: its peak resident memory is its own
    script = ("import resource, sys; from decent.tools.cli import main; "
              f"sys.argv = ['decent', 'run', {str(path)!r}]; main()")
    subprocess.run([sys.executable, "-c", script], check=True, stdout=subprocess.DEVNULL)
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    rows = [json.loads(line) for line in
            next((tmp / f"runs-{n}").glob("*/metrics.jsonl")).read_text().splitlines()]
    return {"n": n, "s": statistics.median(r["round_wall_s"] for r in rows),
            "peak_mb": peak_mb, "bytes": rows[-1]["bytes"],
            "messages": rows[-1]["messages"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[128, 1024])
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="decent-seedflood-scale-") as tmp:
        # RUSAGE_CHILDREN is the largest child so far: the sizes run smallest first
        rows = [measure(n, Path(tmp)) for n in sorted(args.sizes)]
    print("SeedFlood SubCGE, tiny Llama, random 4-regular graph, batched, one process")
    print(f"{'clients':>8} {'s/iteration':>12} {'peak MB':>9} {'bytes/iter':>12} "
          f"{'messages/iter':>14}")
    for r in rows:
        print(f"{r['n']:>8} {r['s']:>12.2f} {r['peak_mb']:>9.0f} {r['bytes']:>12,} "
              f"{r['messages']:>14,}")
    first, last = rows[0], rows[-1]
    span = math.log(last["n"] / first["n"])
    for key, what in (("s", "time"), ("peak_mb", "peak memory"), ("bytes", "bytes")):
        ratio = last[key] / first[key]
        print(f"{what} {first['n']} → {last['n']}: ×{ratio:.2f}, growth exponent "
              f"{math.log(ratio) / span:.2f}")


if __name__ == "__main__":
    main()
