"""Combo's speed-up over FedAvg in simulated time to the target accuracy, paired by seed,
from the records of ``run_all.sh speedup`` (runs named ``<method>-n<workers>-<partition>-s<seed>``).

    python experiments/combo/speedup.py runs/combo/speedup --out experiments/combo/report/speedup
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

NAME = re.compile(r"(combo|fedavg)-n(\d+)-(\w+)-s(\d+)$")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    to_target: dict[tuple[str, int, str, int], float] = {}
    for path in sorted(args.runs.rglob("summary.json")):
        summary = json.loads(path.read_text())
        match = NAME.match(summary["name"])
        if match is None or summary.get("time_to_target_s") is None:
            continue
        method, n, partition, seed = match.groups()
        to_target[(method, int(n), partition, int(seed))] = summary["time_to_target_s"]
    rows = ["| partition | workers | seeds | FedAvg to target (s) | Combo to target (s) | "
            "speed-up, paired by seed |", "|---|---|---|---|---|---|"]
    for partition in sorted({k[2] for k in to_target}):
        for n in sorted({k[1] for k in to_target if k[2] == partition}):
            seeds = sorted(k[3] for k in to_target if k[:3] == ("combo", n, partition)
                           and ("fedavg", n, partition, k[3]) in to_target)
            fed = [to_target[("fedavg", n, partition, s)] for s in seeds]
            com = [to_target[("combo", n, partition, s)] for s in seeds]
            ratio = [f / c for f, c in zip(fed, com, strict=True)]

            def cell(xs: list[float], fmt: str = ".0f") -> str:
                std = statistics.stdev(xs) if len(xs) > 1 else 0.0
                return f"{statistics.mean(xs):{fmt}} ± {std:{fmt}}"

            rows.append(f"| {partition} | {n} | {len(seeds)} | {cell(fed)} | {cell(com)} | "
                        f"{cell(ratio, '.2f')}× |")
    table = "\n".join(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "speedup.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
