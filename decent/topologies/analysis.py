"""Figures of merit of a topology: how fast gossip mixes and how far apart clients are."""

from __future__ import annotations

import math
from typing import Any

import networkx as nx
import numpy as np

from decent.topologies.topology import Topology


def spectral_gap(W: np.ndarray) -> float:
    """``1 − |λ_2|``: one minus the second largest eigenvalue magnitude of symmetric ``W``.

    Consensus error of gossip with ``W`` shrinks by a factor ``|λ_2|`` per round, so the
    gap is the rate at which a topology mixes; it is 0 for a disconnected graph.
    """
    W = np.asarray(W, dtype=float)
    if W.shape[0] < 2:
        return 1.0
    eig = np.linalg.eigvalsh(W)  # ascending; the largest is the consensus eigenvalue 1
    gap = 1.0 - float(np.max(np.abs(eig[:-1])))
    # A repeated eigenvalue 1 (disconnected graph) comes back as 1 ± rounding error.
    return 0.0 if abs(gap) < 1e-12 else gap


def diameter(G: nx.Graph) -> float:
    """Longest shortest path; ``math.inf`` when ``G`` is disconnected.

    Round graphs of time-varying topologies (e.g. a single matching) are usually
    disconnected, and infinity is the honest answer there rather than an error.
    """
    if G.number_of_nodes() == 0:
        return math.inf
    joined = nx.is_strongly_connected(G) if G.is_directed() else nx.is_connected(G)
    return nx.diameter(G) if joined else math.inf


def summarize(topology: Topology, round: int = 0) -> dict[str, Any]:
    """Size, degrees, diameter and spectral gap of ``topology`` in ``round``; on a
    directed graph the out-degrees, the diameter along the edges' direction, strong
    connectivity, and the spectral gap of its column-stochastic push matrix."""
    G = topology.graph(round)
    directed = G.is_directed()
    degrees = [d for _, d in (G.out_degree() if directed else G.degree())]
    W = topology.mixing_matrix(round)
    extra = {}
    if directed:
        from decent.topologies.directed import push_spectral_gap

        extra = {"directed": True, "strongly_connected": topology.strongly_connected(),
                 "spectral_gap": push_spectral_gap(W)}
    return {
        "topology": topology.name,
        "n": topology.n,
        "edges": G.number_of_edges(),
        "min_degree": min(degrees),
        "max_degree": max(degrees),
        "diameter": diameter(G),
        "spectral_gap": spectral_gap(topology.mixing_matrix(round)),
        "weights": topology.weights,
        "time_varying": topology.time_varying,
        "round": round,
        **extra,
    }


def format_summary(d: dict[str, Any]) -> str:
    """An aligned text block of :func:`summarize`'s figures, for the CLI."""
    dia = d["diameter"]
    rows = [
        ("topology", str(d["topology"])),
        ("n", str(d["n"])),
        ("edges", str(d["edges"])),
        ("out-degree" if d.get("directed") else "degree",
         f"{d['min_degree']}..{d['max_degree']}"),
        ("diameter", "∞ (disconnected)" if math.isinf(dia) else str(int(dia))),
        ("spectral gap", f"{d['spectral_gap']:.4g}"),
    ]
    if d.get("directed"):
        strong = d.get("strongly_connected")
        rows.insert(3, ("strongly connected", "unknown" if strong is None else
                        ("yes" if strong else "no (some clients never hear from others)")
                        + (" over one period of rounds" if d.get("time_varying") else "")))
        rows.append(("mixing", "push: uniform out-shares (column-stochastic)"))
    elif "weights" in d:
        rows.append(("weights", str(d["weights"])))
    if d.get("time_varying"):
        note = f"figures are for round {d.get('round', 0)}; the graph is redrawn every round"
        rows.append(("note", note))
    width = max(len(k) for k, _ in rows) + 2
    return "\n".join(f"{k:<{width}}{v}" for k, v in rows)
