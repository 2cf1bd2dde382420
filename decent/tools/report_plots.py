"""The report's plots: a metric against bytes, rounds or simulated time (mean ± std over
seeds per group), and the bytes each edge carried drawn on the graph."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

from decent.tools.report_tables import label
from decent.tools.run_records import Run


def curves(runs: list[Run], metric: str, x: str) -> tuple[list[float], list[float], list[float]]:
    """Mean and std of ``metric`` over the runs at each evaluated round, against ``x``."""
    by_round: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for run in runs:
        for row in run.rows:
            if metric in row:
                by_round[row["round"]].append((row["round"] + 1 if x == "round" else row[x],
                                               row[metric]))
    xs, means, stds = [], [], []
    for r in sorted(by_round):
        points = by_round[r]
        xs.append(statistics.mean(p[0] for p in points))
        ys = [p[1] for p in points]
        means.append(statistics.mean(ys))
        stds.append(statistics.stdev(ys) if len(ys) > 1 else 0.0)
    return xs, means, stds


def plot_metric(groups: dict[tuple, list[Run]], keys: list[str], metric: str, x: str,
                out: Path, log_x: bool) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for values, runs in groups.items():
        xs, means, stds = curves(runs, metric, x)
        if not xs:
            continue
        line, = ax.plot(xs, means, marker="o", markersize=3, label=label(keys, values))
        ax.fill_between(xs, [m - s for m, s in zip(means, stds, strict=True)],
                        [m + s for m, s in zip(means, stds, strict=True)],
                        color=line.get_color(), alpha=0.2)
    names = {"bytes_total": "bytes sent (all edges)", "round": "round",
             "sim_time_total_s": "simulated time (s)"}
    ax.set_xlabel(names[x])
    ax.set_ylabel(f"{metric} (mean ± std over seeds)")
    if log_x:
        ax.set_xscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def plot_edges(run: Run, out: Path) -> bool:
    """The bytes each edge carried over the run, drawn on the graph; False if the run
    has no per-edge record."""
    edges_path = run.path / "edges.json"
    if not edges_path.is_file():
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import networkx as nx

    per_edge: dict[tuple[int, int], float] = defaultdict(float)
    for key, nbytes in json.loads(edges_path.read_text()).items():
        i, j = (int(v) for v in key.split("-"))
        per_edge[(min(i, j), max(i, j))] += nbytes  # both directions of the link
    graph = nx.Graph()
    graph.add_nodes_from(range(int(run.config.get("topology.n", 0))))
    graph.add_edges_from(per_edge)
    fig, ax = plt.subplots(figsize=(5.6, 5.0))
    pos = nx.kamada_kawai_layout(graph) if graph.number_of_nodes() <= 200 else \
        nx.spring_layout(graph, seed=0)
    edges = list(per_edge)
    drawn = nx.draw_networkx_edges(graph, pos, edgelist=edges, ax=ax, width=2.5,
                                   edge_color=[per_edge[e] for e in edges],
                                   edge_cmap=plt.cm.viridis, edge_vmin=0.0)
    nx.draw_networkx_nodes(graph, pos, ax=ax, node_size=60, node_color="#444444")
    fig.colorbar(drawn, ax=ax, label="bytes over the run (both directions)")
    ax.set_title(f"{run.summary.get('strategy')} on {run.summary.get('topology')}, "
                 f"{run.path.name}", fontsize=8)
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return True
