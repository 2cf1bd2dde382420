"""The robust-aggregation table of this folder's README.md: methods × attacks × rules on
digits.yaml, 3 seeds each, two runs at a time in this process's workers, then the table
and the figure from the records.

    python experiments/robust/run.py                 # every arm, then the report
    python experiments/robust/run.py --report-only   # the report from the committed records
    python experiments/robust/run.py --out runs/robust   # fresh records elsewhere
"""

from __future__ import annotations

import argparse
import json
import statistics
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SEEDS = (0, 1, 2)
# each method on the graph it is made for; GASLoC's accelerated variant (outer momentum
# γ = 0.5) with SGD inner steps, so that 40 rounds train it as far as the others (its
# AdamW default at lr 4e-4 is made for longer runs)
METHODS: dict[str, dict[str, Any]] = {
    "dsgd": {"strategy": {"name": "dsgd"}, "topology": {"name": "exponential", "n": 16}},
    "gasloc": {"strategy": {"name": "gasloc", "optimizer": "sgd", "lr": 0.1,
                            "outer_momentum": 0.5},
               "topology": {"name": "exponential", "n": 16}},
    "sgp": {"strategy": {"name": "sgp", "local_steps": 5},
            "topology": {"name": "directed_exponential", "n": 16}},
    "fedavg": {"strategy": {"name": "fedavg"}, "topology": {"name": "star", "n": 16}},
}
# the authors' settings (ClippedGossip's experiments: IPM ε 0.1, dissensus ε 1.5); ALIE at
# ByzFL's default z = 1.5, since the paper's z_max is 0 for 2 Byzantine clients of 16
ATTACKS: dict[str, dict[str, Any] | None] = {
    "none": None, "sign_flip": {"name": "sign_flip"}, "alie": {"name": "alie", "z": 1.5},
    "ipm": {"name": "ipm", "eps": 0.1}, "dissensus": {"name": "dissensus", "eps": 1.5}}
RULES: dict[str, dict[str, Any]] = {
    "mean": {"name": "mean"}, "trimmed_mean": {"name": "trimmed_mean", "trim": 0.2},
    "clipped_gossip": {"name": "clipped_gossip", "byzantine": 2}, "median": {"name": "median"}}


def applies(method: str, attack: str, rule: str) -> bool:
    """A server has no neighbourhood to clip toward, nor a model of its own it sends in
    the upload phase for dissensus to cancel."""
    return not (method == "fedavg" and (rule == "clipped_gossip" or attack == "dissensus"))


def arms() -> list[tuple[str, str, str, int]]:
    return [(m, a, r, s) for m in METHODS for a in ATTACKS for r in RULES for s in SEEDS
            if applies(m, a, r)]


def config(method: str, attack: str, rule: str, seed: int, out: Path) -> dict[str, Any]:
    import yaml

    raw = yaml.safe_load((HERE / "digits.yaml").read_text())
    spec = METHODS[method]
    raw["name"] = f"{method}-{attack}-{rule}-s{seed}"
    raw["seed"] = seed
    raw["topology"] = spec["topology"]
    raw["strategy"] = {**raw["strategy"], **spec["strategy"], "robust": RULES[rule]}
    if ATTACKS[attack] is None:
        raw["faults"] = {"byzantine": []}
    else:
        raw["faults"]["attack"] = ATTACKS[attack]
    raw["tracking"]["out_dir"] = str(out)
    return raw


def run_one(arm: tuple[str, str, str, int], out: str) -> str:
    from decent.engine.config import from_dict
    from decent.run.runner import run

    result = run(from_dict(config(*arm, Path(out))))
    return str(result.run_dir)


def records(out: Path) -> dict[tuple[str, str, str, int], dict[str, Any]]:
    """Each arm's summary, by (method, attack, rule, seed), from the run directories."""
    found = {}
    for summary in sorted(out.glob("*/summary.json")):
        method, attack, rule, seed = summary.parent.name.rsplit("-", 3)[0].split("-")
        found[(method, attack, rule, int(seed[1:]))] = json.loads(summary.read_text())
    return found


def cell(values: list[float]) -> str:
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def table(found: dict[tuple[str, str, str, int], dict[str, Any]]) -> list[str]:
    """Final honest accuracy per method and attack (rows) and rule (columns), and each
    rule's paired difference from the mean with the seeds that agree on its sign."""
    lines = ["| method | attack | " + " | ".join(RULES) + " | bytes (a run) |",
             "|---|---|" + "---|" * len(RULES) + "---|"]
    for method in METHODS:
        for attack in ATTACKS:
            if not applies(method, attack, "mean"):
                continue
            row = [method, attack]
            base = [found[(method, attack, "mean", s)]["gmp_accuracy"] for s in SEEDS]
            for rule in RULES:
                if not applies(method, attack, rule):
                    row.append("—")
                    continue
                acc = [found[(method, attack, rule, s)]["gmp_accuracy"] for s in SEEDS]
                text = cell(acc)
                if rule != "mean":
                    diff = [a - b for a, b in zip(acc, base, strict=True)]
                    agree = sum(d > 0 for d in diff) if statistics.mean(diff) > 0 else \
                        sum(d < 0 for d in diff)
                    text += f" ({statistics.mean(diff):+.3f}, {agree}/3)"
                row.append(text)
            row.append(f"{found[(method, attack, 'mean', 0)]['bytes_total']:,}")
            lines.append("| " + " | ".join(row) + " |")
    return lines


def figure(found: dict[tuple[str, str, str, int], dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(METHODS), figsize=(4 * len(METHODS), 4.0), sharey=True)
    width = 0.8 / len(RULES)
    for ax, method in zip(axes, METHODS, strict=True):
        for k, rule in enumerate(RULES):
            xs, ys, errs = [], [], []
            for i, attack in enumerate(ATTACKS):
                if applies(method, attack, rule):
                    acc = [found[(method, attack, rule, s)]["gmp_accuracy"] for s in SEEDS]
                    xs.append(i + (k - (len(RULES) - 1) / 2) * width)
                    ys.append(statistics.mean(acc))
                    errs.append(statistics.stdev(acc))
            ax.bar(xs, ys, width, yerr=errs, label=rule, color=f"C{k}")
        ax.set_xticks(range(len(ATTACKS)), list(ATTACKS), rotation=30)
        ax.set_title(method)
        ax.set_ylim(0, 1)
    axes[0].set_ylabel("final accuracy, honest clients' average")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(RULES), fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(HERE / "runs"), help="where the records go")
    p.add_argument("--report-only", action="store_true", help="only the report")
    p.add_argument("--parallel", type=int, default=2)
    args = p.parse_args()
    out = Path(args.out)
    if not args.report_only:
        todo = [arm for arm in arms() if arm not in records(out)]
        with ProcessPoolExecutor(args.parallel) as pool:
            list(pool.map(run_one, todo, [str(out)] * len(todo)))
    found = records(out)
    (HERE / "report").mkdir(exist_ok=True)
    (HERE / "report" / "table.md").write_text("\n".join(table(found)) + "\n")
    figure(found, HERE / "report" / "accuracy.png")
    figure(found, HERE.parents[1] / "docs" / "figures" / "robust.png")  # the results page's
    print("\n".join(table(found)))


if __name__ == "__main__":
    main()
