"""Graphs fixed by ``n`` (and ``rows`` or ``edges``): rings, paths, grids, stars, complete
and exponential graphs, and one spelled out edge by edge.

Every builder returns an ``nx.Graph`` whose nodes are exactly ``0..n-1`` (client ids),
so matrices, message routing and data shards all share one numbering.
"""

from __future__ import annotations

import networkx as nx

from decent.core.errors import ConfigError
from decent.topologies.config import EdgeListConfig, GridConfig, TopologyConfig, is_int
from decent.topologies.grid import grid_shape


def empty_graph(n: int) -> nx.Graph:
    """Nodes ``0..n-1`` and no edges: where the builders that add edges by rule start."""
    G = nx.Graph()
    G.add_nodes_from(range(n))
    return G


def _grid(cfg: GridConfig, periodic: bool) -> nx.Graph:
    rows, cols = grid_shape(cfg.name, cfg.n, cfg.rows, min_side=3 if periodic else 2)
    G = nx.grid_2d_graph(rows, cols, periodic=periodic)
    # Row-major numbering: client r·cols + c sits at row r, column c.
    return nx.relabel_nodes(G, {(r, c): r * cols + c for r, c in G.nodes})


def ring(cfg: TopologyConfig) -> nx.Graph:
    """Cycle ``0 - 1 - ... - (n-1) - 0``."""
    return nx.cycle_graph(cfg.n)


def path(cfg: TopologyConfig) -> nx.Graph:
    """Line ``0 - 1 - ... - (n-1)``: the sparsest connected graph, diameter n − 1."""
    return nx.path_graph(cfg.n)


def meshgrid(cfg: GridConfig) -> nx.Graph:
    """``rows × cols`` grid without wrap-around, nodes numbered row-major."""
    return _grid(cfg, periodic=False)


def torus(cfg: GridConfig) -> nx.Graph:
    """``rows × cols`` grid wrapped in both directions (sides ≥ 3, so no double edges)."""
    return _grid(cfg, periodic=True)


def complete(cfg: TopologyConfig) -> nx.Graph:
    """Every pair of clients connected."""
    return nx.complete_graph(cfg.n)


def star(cfg: TopologyConfig) -> nx.Graph:
    """Hub (server) at vertex 0 connected to every other client."""
    return nx.star_graph(cfg.n - 1)


def exponential(cfg: TopologyConfig) -> nx.Graph:
    """``i ↔ (i ± 2^k) mod n`` for every ``2^k < n``: diameter O(log n), degree O(log n)."""
    n = cfg.n
    G = empty_graph(n)
    hops = [2**k for k in range(n.bit_length()) if 2**k < n]
    G.add_edges_from((i, (i + h) % n) for h in hops for i in range(n))
    return G


def edge_list(cfg: EdgeListConfig) -> nx.Graph:
    """The graph spelled out in ``topology.edges`` as ``[u, v]`` pairs (with ``directed``:
    each pair an edge from u to v only)."""
    n, edges = cfg.n, cfg.edges
    if edges is None:
        raise ConfigError(
            "topology.edges", "edge_list needs topology.edges, a list of [u, v] pairs"
        )
    if not isinstance(edges, (list, tuple)):
        raise ConfigError(
            "topology.edges", f"must be a list of [u, v] pairs (got {type(edges).__name__})"
        )
    G = empty_graph(n)
    if cfg.directed:
        G = nx.DiGraph(G)
    for k, e in enumerate(edges):
        if not isinstance(e, (list, tuple)) or len(e) != 2 or not all(map(is_int, e)):
            raise ConfigError(
                f"topology.edges[{k}]", f"must be a pair [u, v] of integers (got {e!r})"
            )
        u, v = int(e[0]), int(e[1])
        if not (0 <= u < n and 0 <= v < n):
            raise ConfigError(
                f"topology.edges[{k}]",
                f"edge [{u}, {v}] names a node outside 0..{n - 1}; nodes are 0..n-1 with n={n}",
            )
        if u == v:
            raise ConfigError(
                f"topology.edges[{k}]", f"self-loop [{u}, {v}] is not allowed; remove it"
            )
        G.add_edge(u, v)
    return G
