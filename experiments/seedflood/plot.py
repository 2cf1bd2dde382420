"""GMP test accuracy against total bytes sent, one line per run (the SeedFlood paper's
Figure 1 shape).

    python experiments/seedflood/plot.py RUN_DIR [RUN_DIR ...] [--out accuracy_vs_bytes.png]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", type=Path, help="run directories (with metrics.jsonl)")
    p.add_argument("--out", type=Path, default=Path("accuracy_vs_bytes.png"))
    args = p.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for run in args.runs:
        rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        points = [(r["bytes_total"], r["gmp_accuracy"]) for r in rows if "gmp_accuracy" in r]
        if not points:
            continue
        summary = json.loads((run / "summary.json").read_text()) \
            if (run / "summary.json").is_file() else {}
        label = f"{summary.get('name', run.name)} ({summary.get('topology', '')}, " \
                f"n={summary.get('clients', '?')})"
        xs, ys = zip(*points, strict=True)
        ax.plot([max(x, 1) for x in xs], ys, marker="o", label=label)
    ax.set_xscale("log")
    ax.set_xlabel("total bytes sent (all edges)")
    ax.set_ylabel("GMP test accuracy")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
