"""Table and plot of the pretraining comparison: validation loss of the global average
model (GMP) against total bytes sent and against communication rounds.

    python experiments/pretraining/report.py RUN_DIR [RUN_DIR ...] \
        [--out loss_vs_bytes.png] [--table results.md]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from statistics import mean

import yaml


def load(run: Path) -> dict:
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((run / "summary.json").read_text())
    strategy, topology = cfg["strategy"], cfg["topology"]
    workers = topology["n"] - 1 if topology["name"] == "star" else topology["n"]
    # Peers a worker sends to per round: the server for a star, else messages / workers.
    peers = 1.0 if topology["name"] == "star" else mean(r["messages"] for r in rows) / workers
    label = cfg["name"].removeprefix("pretrain-")
    if strategy["name"] == "gasloc" and strategy.get("outer_momentum", 0) > 0:
        label += f" (γ={strategy['outer_momentum']})"
    return {
        "label": label,
        "method": strategy["name"],
        "topology": topology["name"],
        "workers": workers,
        "H": strategy["local_steps"],
        "rounds": cfg["rounds"],
        "peers": peers,
        "summary": summary,
        "curve": [(r["round"] + 1, r["bytes_total"], r["gmp_loss"]) for r in rows
                  if "gmp_loss" in r],
    }


def table(runs: list[dict]) -> str:
    head = ("| run | method | graph | workers | H | rounds | inner steps / worker | peers / worker "
            "/ round | GMP val loss | mean worker val loss | total bytes | busiest link | "
            "sim. comm time |")
    lines = [head, "|" + "---|" * 13]
    for r in sorted(runs, key=lambda r: r["summary"]["gmp_loss"]):
        s = r["summary"]
        worker_loss = s.get("client_loss_mean", s["gmp_loss"] if s["consensus_distance"] == 0
                            else float("nan"))
        lines.append(
            f"| {r['label']} | {r['method']} | {r['topology']} | {r['workers']} | {r['H']} | "
            f"{r['rounds']} | {r['H'] * r['rounds']} | {r['peers']:.2f} | {s['gmp_loss']:.3f} | "
            f"{worker_loss:.3f} | {s['bytes_total'] / 1e6:,.1f} MB | "
            f"{s['max_edge_bytes_total'] / 1e6:,.1f} MB | {s['sim_time_total_s']:.2f} s |"
        )
    return "\n".join(lines) + "\n"


def plot(runs: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_bytes, by_rounds) = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for r in sorted(runs, key=lambda r: r["label"]):
        rounds, sent, loss = zip(*r["curve"], strict=True)
        by_bytes.plot(sent, loss, marker="o", ms=3, label=r["label"])
        by_rounds.plot(rounds, loss, marker="o", ms=3, label=r["label"])
    by_bytes.set_xscale("log")
    by_bytes.set_xlabel("total bytes sent (all links)")
    by_rounds.set_xscale("log")
    by_rounds.set_xlabel("communication rounds")
    by_bytes.set_ylabel("validation loss of the average model")
    for ax in (by_bytes, by_rounds):
        ax.grid(True, which="both", alpha=0.3)
    by_rounds.legend(fontsize=8)
    fig.suptitle("tiny-llama on Shakespeare, 8 workers, 600 inner AdamW steps each")
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", type=Path, help="run directories")
    p.add_argument("--out", type=Path, default=Path("loss_vs_bytes.png"))
    p.add_argument("--table", type=Path, default=None, help="also write the table here")
    args = p.parse_args()
    runs = [load(run) for run in args.runs if (run / "summary.json").is_file()]
    text = table(runs)
    print(text)
    if args.table:
        args.table.write_text(text)
    plot(runs, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
