"""Mean ± std over seeds of the fault comparison's runs (run_all.sh).

    python experiments/faults/summarize.py runs/faults/*
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def spread(values: list[float], fmt: str) -> str:
    if len(values) < 2:
        return format(values[0], fmt) if values else "—"
    return f"{format(statistics.mean(values), fmt)} ± {format(statistics.stdev(values), fmt)}"


def main(paths: list[str]) -> None:
    groups: dict[str, list[dict]] = defaultdict(list)
    for path in paths:
        summary_path = Path(path) / "summary.json"
        if summary_path.is_file():
            summary = json.loads(summary_path.read_text())
            groups[re.sub(r"-s\d+$", "", summary["name"])].append(summary)
    print("| run | seeds | final GMP accuracy | reached 85 % | time to 85 % (s) | rounds to 85 % "
          "| simulated time, 100 rounds (s) |")
    print("|---|---|---|---|---|---|---|")
    for name in sorted(groups):
        runs = groups[name]
        hit = [r for r in runs if r["time_to_target_s"] is not None]
        print(f"| {name} | {len(runs)} | {spread([r['gmp_accuracy'] for r in runs], '.3f')} "
              f"| {len(hit)}/{len(runs)} | {spread([r['time_to_target_s'] for r in hit], '.2f')} "
              f"| {spread([r['rounds_to_target'] for r in hit], '.1f')} "
              f"| {spread([r['sim_time_total_s'] for r in runs], '.2f')} |")


if __name__ == "__main__":
    main(sys.argv[1:])
