"""The report's per-edge picture: the bytes each directed edge carried over a run, as a
heat map with one row per sender and one column per receiver.

A run's ``edges.json`` holds the bytes of every directed edge, ``"i-j": bytes`` for i → j.
Cell (i, j) is exactly that number, never summed with j → i: a method that sends one way
(a push-only gossip, a directed ring) shows one-way, and an asymmetric one (a server that
sends more than it receives) shows which way the bytes went.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np

from decent.tools.plot_ticks import fit_tick_labels
from decent.tools.run_records import Run

if TYPE_CHECKING:
    from pathlib import Path

    from matplotlib.figure import Figure


def edge_matrix(edges: dict[str, float], n: int) -> np.ndarray:
    """Bytes sent from i to j at [i, j] (rows: senders, columns: receivers), from
    ``edges.json``'s ``{"i-j": bytes}``; ``n`` × ``n`` (wider if an edge names a node
    beyond ``n``)."""
    pairs = []
    for key, nbytes in edges.items():
        sender, receiver = (int(v) for v in key.split("-"))
        pairs.append((sender, receiver, float(nbytes)))
    size = max([n, *(max(i, j) + 1 for i, j, _ in pairs)])
    matrix = np.zeros((size, size))
    for i, j, nbytes in pairs:
        matrix[i, j] += nbytes
    return matrix


def edges_figure(matrix: np.ndarray, title: str) -> Figure:
    """``matrix`` (:func:`edge_matrix`) as a heat map: senders down, receivers across;
    a pair that exchanged nothing is left blank, apart from the colour of a small count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import EngFormatter, MaxNLocator

    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="white")
    fig, ax = plt.subplots(figsize=(5.6, 5.0))
    image = ax.imshow(np.ma.masked_equal(matrix, 0.0), cmap=cmap, vmin=0.0,
                      vmax=float(matrix.max()) or 1.0, interpolation="nearest")
    for axis in (ax.xaxis, ax.yaxis):  # client ids: whole numbers only
        axis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("receiver (to client j)")
    ax.set_ylabel("sender (from client i)")
    bar = fig.colorbar(image, ax=ax, label="bytes sent i → j over the run (blank: none)")
    bar.ax.yaxis.set_major_formatter(EngFormatter(unit="B"))
    ax.set_title(title, fontsize=8)
    fig.tight_layout()
    fit_tick_labels(fig)
    return fig


def plot_edges(run: Run, out: Path) -> bool:
    """The run's per-edge heat map (:func:`edges_figure`) at ``out``; False if the run has
    no per-edge record."""
    edges_path = run.path / "edges.json"
    if not edges_path.is_file():
        return False
    import matplotlib.pyplot as plt

    matrix = edge_matrix(json.loads(edges_path.read_text()),
                         int(run.config.get("topology.n", 0)))
    fig = edges_figure(matrix, f"{run.summary.get('strategy')} on "
                       f"{run.summary.get('topology')}, {run.path.name}")
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return True
