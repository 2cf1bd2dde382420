"""Combo's speed-up over FedAvg in simulated time to the target accuracy, paired by seed,
from the records of ``run_all.sh speedup`` (runs named ``<method>-n<workers>-<partition>-s<seed>``).
Besides the speed-up: the per-seed difference in rounds to the target (Combo − FedAvg), and
the per-seed growth of the speed-up from the fewest workers to each larger number; each as
mean ± std over seeds with how many seeds agree in sign with the mean.

    python experiments/combo/speedup.py runs/combo/speedup --out experiments/combo/report/speedup
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

NAME = re.compile(r"(combo|fedavg)-n(\d+)-(\w+)-s(\d+)$")
Key = tuple[str, int, str, int]  # method, workers, partition, seed


def cell(xs: list[float], fmt: str = ".0f") -> str:
    std = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{statistics.mean(xs):{fmt}} ± {std:{fmt}}"


def diff_cell(xs: list[float], fmt: str) -> str:
    """mean ± std of per-seed differences, and the seeds whose sign is the mean's."""
    mean = statistics.mean(xs)
    agree = sum(1 for x in xs if x != 0 and (x > 0) == (mean > 0))
    std = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{mean:+{fmt}} ± {std:{fmt}} ({agree}/{len(xs)} seeds agree)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    to_target: dict[Key, float] = {}
    rounds: dict[Key, int] = {}
    for path in sorted(args.runs.rglob("summary.json")):
        summary = json.loads(path.read_text())
        match = NAME.match(summary["name"])
        if match is None or summary.get("time_to_target_s") is None:
            continue
        method, n, partition, seed = match.groups()
        key = (method, int(n), partition, int(seed))
        to_target[key] = summary["time_to_target_s"]
        rounds[key] = summary["rounds_to_target"]
    rows = ["| partition | workers | seeds | FedAvg to target (s) | Combo to target (s) | "
            "speed-up, paired by seed | rounds to target, Combo − FedAvg |",
            "|---|---|---|---|---|---|---|"]
    growth = ["| partition | workers | seeds | speed-up minus the fewest workers' |",
              "|---|---|---|---|"]
    for partition in sorted({k[2] for k in to_target}):
        ratios: dict[int, dict[int, float]] = {}
        for n in sorted({k[1] for k in to_target if k[2] == partition}):
            seeds = sorted(k[3] for k in to_target if k[:3] == ("combo", n, partition)
                           and ("fedavg", n, partition, k[3]) in to_target)
            fed = [to_target[("fedavg", n, partition, s)] for s in seeds]
            com = [to_target[("combo", n, partition, s)] for s in seeds]
            ratio = [f / c for f, c in zip(fed, com, strict=True)]
            ratios[n] = dict(zip(seeds, ratio, strict=True))
            extra = [rounds[("combo", n, partition, s)] - rounds[("fedavg", n, partition, s)]
                     for s in seeds]
            rows.append(f"| {partition} | {n} | {len(seeds)} | {cell(fed)} | {cell(com)} | "
                        f"{cell(ratio, '.2f')}× | {diff_cell(extra, '.1f')} |")
        fewest = min(ratios)
        for n in sorted(ratios)[1:]:
            seeds = sorted(set(ratios[n]) & set(ratios[fewest]))
            diffs = [ratios[n][s] - ratios[fewest][s] for s in seeds]
            growth.append(f"| {partition} | {n} − {fewest} | {len(seeds)} | "
                          f"{diff_cell(diffs, '.2f')} |")
    table = "\n".join(rows) + "\n\n" + "\n".join(growth)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "speedup.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
