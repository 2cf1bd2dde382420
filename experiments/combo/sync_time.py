"""Combo's synchronisation time against S, measured (max-min fair sharing of every link and
NIC, decent's default network model) beside the closed form, from the records of
``sync_time.yaml`` runs (one round each).

Closed form, when every worker pulls R·S segments from distinct peers and serves as many
(the symmetric case): the slower of one segment on its 10 Mbps pair link and all R·S
replies through the worker's 100 Mbps NIC,
    T(S) = max(8·b_seg / 10 Mb/s, 8·R·(4d + 12S) / 100 Mb/s),  b_seg = 4·⌈largest segment⌉ + 12,
plus the request phase (S·R requests of 8 bytes). Random peer choice makes some workers
serve more than R·S segments, so the measured time sits at or above it.

    python experiments/combo/sync_time.py runs/combo/sync --out experiments/combo/report/sync
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import yaml

from decent.strategies.combo import segment_bounds


def closed_form(d: int, segments: int, replicas: int, pair_bps: float, nic_bps: float
                ) -> float:
    seg = max(hi - lo for lo, hi in segment_bounds(d, segments))
    serve = max(8 * (4 * seg + 12) / pair_bps,
                8 * replicas * (4 * d + 12 * segments) / nic_bps)
    requests = max(8 * 8 / pair_bps, 8 * 8 * segments * replicas / nic_bps)
    return serve + requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    times: dict[int, list[float]] = {}
    setting = None
    for summary in sorted(args.runs.rglob("summary.json")):
        cfg = yaml.safe_load((summary.parent / "config.yaml").read_text())
        s = cfg["strategy"]["segments"]
        times.setdefault(s, []).append(json.loads(summary.read_text())["sim_time_total_s"])
        hidden = cfg["model"]["hidden"][0]  # digits MLP 64 → h → 10: d = 64h + h + 10h + 10
        setting = (75 * hidden + 10, cfg["strategy"]["replicas"], cfg["topology"]["n"],
                   cfg["network"]["link_mbps"] * 1e6, cfg["network"]["node_mbps"] * 1e6)
    assert setting is not None, f"no run records under {args.runs}"
    d, replicas, n, pair, nic = setting
    rows = ["| S | seeds | sync time, measured (s) | closed form (s) | measured / S=1 |",
            "|---|---|---|---|---|"]
    base = statistics.mean(times[min(times)])
    xs, measured, spread, formula = [], [], [], []
    for s in sorted(times):
        mean = statistics.mean(times[s])
        std = statistics.stdev(times[s]) if len(times[s]) > 1 else 0.0
        form = closed_form(d, s, replicas, pair, nic)
        xs.append(s)
        measured.append(mean)
        spread.append(std)
        formula.append(form)
        rows.append(f"| {s} | {len(times[s])} | {mean:.3f} ± {std:.2g} | {form:.3f} | "
                    f"{mean / base:.2f} |")
    table = "\n".join(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.md").write_text(
        f"Combo sync time, n = {n} workers, R = {replicas}, d = {d:,} values, "
        f"{pair / 1e6:g} Mbps per pair, {nic / 1e6:g} Mbps per NIC\n\n{table}\n")
    print(table)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from decent.tools.report_plots import legend_outside, save, series_styles

    names = ["measured (max-min sharing)", "closed form (symmetric pulls)"]
    look = series_styles([(name,) for name in names], ["series"])
    fig, ax = plt.subplots(figsize=(5, 3.2))
    measured_line = ax.errorbar(xs, measured, yerr=spread, **look[(names[0],)].kwargs())
    formula_line, = ax.plot(xs, formula, **look[(names[1],)].kwargs())
    ax.set_xlabel("segments S")
    ax.set_ylabel("sync time per round (s)")
    ax.set_title(f"Combo, n = {n}, R = {replicas}")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    legend_outside(fig, [measured_line, formula_line], names)
    save(fig, args.out / "sync_time_vs_segments.png")


if __name__ == "__main__":
    main()
