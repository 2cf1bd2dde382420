"""Paired differences between two settings of one config key, seed by seed, from the
records of ``run_all.sh`` (each run's config.yaml and summary.json): for every pair A − B,
the mean ± std over seeds of (A's value − B's value) of each metric, and how many seeds
agree in sign with the mean. Runs of the same seed share the data split and the initial
model, so the difference removes what the seed alone moves.

    python experiments/combo/paired.py runs/combo/replicas --key strategy.replicas \\
        --pair 1,2 --pair 4,2 --pair 8,2 --pair 16,2 --pair 16,8 \\
        --out experiments/combo/report/replicas
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import yaml

METRICS = (("client_accuracy_mean", "final client_accuracy_mean", ".4f"),
           ("rounds_to_target", "rounds to target", ".1f"),
           ("time_to_target_s", "time to target (s)", ".0f"))


def lookup(cfg: dict[str, Any], key: str) -> Any:
    for part in key.split("."):
        cfg = cfg[part]
    return cfg


def load(runs: Path, key: str) -> dict[tuple[str, int], dict[str, Any]]:
    """(str(value of key), seed) → summary, for every run under ``runs``."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for path in sorted(runs.rglob("summary.json")):
        cfg = yaml.safe_load((path.parent / "config.yaml").read_text())
        out[(str(lookup(cfg, key)), int(cfg["seed"]))] = json.loads(path.read_text())
    return out


def cell(diffs: list[float], fmt: str) -> str:
    if not diffs:
        return "n/a"
    mean = statistics.mean(diffs)
    std = statistics.stdev(diffs) if len(diffs) > 1 else 0.0
    agree = sum(1 for d in diffs if (d > 0) == (mean > 0) and d != 0)
    return f"{mean:+{fmt}} ± {std:{fmt}} ({agree}/{len(diffs)} seeds agree)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("--key", required=True, help="config key, e.g. strategy.replicas")
    parser.add_argument("--pair", action="append", required=True,
                        help="A,B: the difference A − B (repeat for more pairs)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    runs = load(args.runs, args.key)
    header = [f"{args.key}: A − B", "seeds", *(name for _, name, _ in METRICS)]
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for pair in args.pair:
        a, b = pair.split(",")
        seeds = sorted(s for v, s in runs if v == a and (b, s) in runs)
        cells = []
        for metric, _, fmt in METRICS:
            values = [(runs[(a, s)].get(metric), runs[(b, s)].get(metric)) for s in seeds]
            # a seed that missed the target in either run has no difference
            diffs = [x - y for x, y in values if x is not None and y is not None]
            cells.append(cell(diffs, fmt))
        rows.append(f"| {a} − {b} | {','.join(map(str, seeds))} | " + " | ".join(cells) + " |")
    table = "\n".join(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "paired.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
