"""Graphs fixed by ``n`` (and ``rows`` or ``edges``): rings, paths, grids, stars, complete
and exponential graphs, and one spelled out edge by edge.

Every builder returns an ``nx.Graph`` whose nodes are exactly ``0..n-1`` (client ids),
so matrices, message routing and data shards all share one numbering.
"""

from __future__ import annotations

import math

import networkx as nx

from decent.core.errors import ConfigError
from decent.topologies.config import EdgeListConfig, GridConfig, TopologyConfig, is_int


def empty_graph(n: int) -> nx.Graph:
    """Nodes ``0..n-1`` and no edges: where the builders that add edges by rule start."""
    G = nx.Graph()
    G.add_nodes_from(range(n))
    return G


def _default_rows(n: int) -> int:
    """Largest divisor of ``n`` not above ``sqrt(n)``: the squarest grid."""
    return max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)


def _factors_as_grid(n: int, min_side: int) -> bool:
    return _default_rows(n) >= min_side


def _nearest_grid_sizes(n: int, min_side: int) -> tuple[int, int]:
    """The closest sizes below and above ``n`` that do factor as a grid."""
    lo = next(
        (m for m in range(n - 1, min_side * min_side - 1, -1) if _factors_as_grid(m, min_side)),
        None,
    )
    hi = next(
        m
        for m in range(max(n + 1, min_side * min_side), 4 * n + 16)
        if _factors_as_grid(m, min_side)
    )
    return (lo if lo is not None else hi), hi


def _grid_shape(cfg: GridConfig, min_side: int) -> tuple[int, int]:
    """``(rows, cols)`` for a meshgrid (sides ≥ 2) or torus (sides ≥ 3)."""
    kind = cfg.name
    n = cfg.n
    if cfg.rows is not None:
        rows = cfg.rows
        if not is_int(rows) or rows < min_side:
            raise ConfigError(
                "topology.rows", f"{kind} needs an integer rows ≥ {min_side} (got {rows!r})"
            )
        if n % rows != 0:
            divisors = [d for d in range(min_side, n // min_side + 1) if n % d == 0]
            hint = (
                f"choose one of: {', '.join(map(str, divisors))}"
                if divisors
                else "change topology.n"
            )
            raise ConfigError("topology.rows", f"rows={rows} does not divide n={n}; {hint}")
        cols = n // rows
        if cols < min_side:
            raise ConfigError(
                "topology.rows",
                f"rows={rows} leaves cols = n/rows = {cols}, but {kind} needs cols ≥ "
                f"{min_side}; use a smaller rows or a larger n",
            )
        return rows, cols
    rows = _default_rows(n)
    if rows < min_side:
        why = f"{n} is prime" if rows == 1 else f"{n} has no such factorisation"
        lo, hi = _nearest_grid_sizes(n, min_side)
        sizes = f"{lo} or {hi}" if lo != hi else f"{hi}"
        raise ConfigError(
            "topology.n",
            f"{kind} needs n = rows·cols with rows, cols ≥ {min_side}; {why} — use e.g. "
            f"{sizes} (topology.rows then picks the grid's shape)",
        )
    return rows, n // rows


def _grid(cfg: GridConfig, periodic: bool) -> nx.Graph:
    rows, cols = _grid_shape(cfg, min_side=3 if periodic else 2)
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
    """The graph spelled out in ``topology.edges`` as ``[u, v]`` pairs."""
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
