"""The two-tier graph: aggregators on a complete overlay, each worker linked to the
aggregator nearest to it."""

from __future__ import annotations

from collections.abc import Callable

import networkx as nx

from decent.topologies.config import TwoTierConfig
from decent.topologies.shapes import empty_graph

Latency = Callable[[int, int], float]


def nearest_aggregators(n: int, aggregators: int, latency: Latency | None) -> dict[int, int]:
    """Worker → aggregator of a two-tier graph: the aggregator with the lowest latency to
    the worker; ties (all of them, without a latency model) go round robin from the
    worker's id, (a − w) mod A smallest first, so equal latencies give balanced tiers."""
    A = aggregators
    out = {}
    for w in range(A, n):
        out[w] = min(range(A), key=lambda a, w=w: (
            0.0 if latency is None else latency(w, a), (a - w) % A))
    return out


def two_tier(cfg: TwoTierConfig, assignment: dict[int, int] | None = None) -> nx.Graph:
    """Aggregators 0..A-1 on a complete overlay; each worker linked to its aggregator
    (``assignment``; default: the round-robin one, as without a latency model)."""
    if assignment is None:
        assignment = nearest_aggregators(cfg.n, cfg.aggregators, None)
    G = empty_graph(cfg.n)
    G.add_edges_from((a, b) for a in range(cfg.aggregators)
                     for b in range(a + 1, cfg.aggregators))
    G.add_edges_from(assignment.items())
    return G
