"""Communication graphs: config, builders and the :class:`Topology` the platform runs on.

Every builder returns an ``nx.Graph`` whose nodes are exactly ``0..n-1`` (client ids),
so matrices, message routing and data shards all share one numbering. Random graphs are
seeded from ``topology.seed`` so that a run can be repeated edge for edge.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import networkx as nx
import numpy as np

from decent.core.errors import ConfigError
from decent.core.graph import GraphFacts, RoundGraph
from decent.core.schema import at_least, in_range, one_of, seed_field, validate_fields
from decent.topologies.mixing import MIXING_KINDS, mixing_matrix

STATIC_TOPOLOGIES = (
    "ring",
    "path",
    "meshgrid",
    "torus",
    "complete",
    "star",
    "exponential",
    "erdos_renyi",
    "random_regular",
    "edge_list",
    "two_tier",
)
TIME_VARYING_TOPOLOGIES = ("one_peer", "two_peer")
TOPOLOGIES = STATIC_TOPOLOGIES + TIME_VARYING_TOPOLOGIES

# Random graphs are redrawn (seed, seed+1, ...) until connected, at most this many times.
MAX_DRAWS = 100


@dataclass(frozen=True)
class TopologyConfig:
    """The ``topology`` section of a run config.

    Only the fields the chosen ``name`` uses are read: ``p`` for ``erdos_renyi``,
    ``degree`` for ``random_regular``, ``rows`` for ``meshgrid``/``torus``, ``edges`` for
    ``edge_list``; ``seed`` for every random graph.
    """

    name: str = one_of(TOPOLOGIES, "ring")
    n: int = at_least(1, 16)  # ≥ 2 except for `complete` (n = 1: a single client)
    seed: int = seed_field(0)
    p: float = in_range(0.3, 0, 1, lo_open=True)
    degree: int = at_least(1, 3)
    rows: int | None = at_least(2, None, nullable=True)
    edges: list | None = None  # checked pair by pair when the graph is built
    aggregators: int = at_least(1, 8)  # two_tier: vertices 0..A-1 aggregate, the rest work
    weights: str = one_of(MIXING_KINDS, "metropolis")

    def validate(self, prefix: str = "topology") -> None:
        # A single client (centralised baselines such as plain MeZO) is a complete graph.
        least = 1 if self.name == "complete" else 2
        if not _is_int(self.n) or self.n < least:
            raise ConfigError(f"{prefix}.n", f"{self.name} needs an integer number of "
                              f"clients n ≥ {least} (got {self.n!r})")
        if self.name == "two_tier" and self.aggregators >= self.n:
            raise ConfigError(f"{prefix}.aggregators",
                              f"must be below n = {self.n}, so that some vertices are "
                              f"workers (got {self.aggregators})")


# ---------------------------------------------------------------------------- helpers


def _is_int(x: object) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _empty(n: int) -> nx.Graph:
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


def _grid_shape(cfg: TopologyConfig, min_side: int) -> tuple[int, int]:
    """``(rows, cols)`` for a meshgrid (sides ≥ 2) or torus (sides ≥ 3)."""
    kind = cfg.name
    n = cfg.n
    if cfg.rows is not None:
        rows = cfg.rows
        if not _is_int(rows) or rows < min_side:
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


def _grid(cfg: TopologyConfig, periodic: bool) -> nx.Graph:
    rows, cols = _grid_shape(cfg, min_side=3 if periodic else 2)
    G = nx.grid_2d_graph(rows, cols, periodic=periodic)
    # Row-major numbering: client r·cols + c sits at row r, column c.
    return nx.relabel_nodes(G, {(r, c): r * cols + c for r, c in G.nodes})


def _connected_draw(
    draw: Callable[[int], nx.Graph], seed: int, field: str, message: str
) -> nx.Graph:
    """Draw ``draw(seed)``, ``draw(seed+1)``, ... until the graph is connected.

    A disconnected communication graph can never reach consensus, so rather than fail the
    run later we redraw; the seed sequence keeps the result reproducible.
    """
    for attempt in range(MAX_DRAWS):
        G = draw(seed + attempt)
        if nx.is_connected(G):
            return G
    raise ConfigError(field, message)


# ---------------------------------------------------------------------------- builders


def ring(cfg: TopologyConfig) -> nx.Graph:
    """Cycle ``0 - 1 - ... - (n-1) - 0``."""
    return nx.cycle_graph(cfg.n)


def path(cfg: TopologyConfig) -> nx.Graph:
    """Line ``0 - 1 - ... - (n-1)``: the sparsest connected graph, diameter n − 1."""
    return nx.path_graph(cfg.n)


def meshgrid(cfg: TopologyConfig) -> nx.Graph:
    """``rows × cols`` grid without wrap-around, nodes numbered row-major."""
    return _grid(cfg, periodic=False)


def torus(cfg: TopologyConfig) -> nx.Graph:
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
    G = _empty(n)
    hops = [2**k for k in range(n.bit_length()) if 2**k < n]
    G.add_edges_from((i, (i + h) % n) for h in hops for i in range(n))
    return G


def erdos_renyi(cfg: TopologyConfig) -> nx.Graph:
    """G(n, p) redrawn with seed, seed+1, ... until connected."""
    n, p = cfg.n, cfg.p
    if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0 < p <= 1:
        raise ConfigError("topology.p", f"edge probability must be in (0, 1] (got {p!r})")
    suggested = min(1.0, 2 * math.log(n) / n)
    return _connected_draw(
        lambda s: nx.gnp_random_graph(n, p, seed=s),
        cfg.seed,
        "topology.p",
        f"p={p} is too small for n={n}: no connected graph in {MAX_DRAWS} draws; use "
        f"p ≥ 2·ln(n)/n ≈ {suggested:.3g}",
    )


def random_regular(cfg: TopologyConfig) -> nx.Graph:
    """Uniform random ``degree``-regular graph, redrawn until connected."""
    n, d = cfg.n, cfg.degree
    if not _is_int(d) or not 1 <= d < n:
        raise ConfigError(
            "topology.degree", f"random_regular needs an integer 1 ≤ degree < n={n} (got {d!r})"
        )
    if (n * d) % 2:
        raise ConfigError(
            "topology.degree",
            f"random_regular needs n·degree even; {n}·{d} is odd — use degree {d - 1} or "
            f"{d + 1}, or an even n",
        )
    return _connected_draw(
        lambda s: nx.random_regular_graph(d, n, seed=s),
        cfg.seed,
        "topology.degree",
        f"degree={d} gave no connected graph on n={n} nodes in {MAX_DRAWS} draws; use degree ≥ 3",
    )


def edge_list(cfg: TopologyConfig) -> nx.Graph:
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
    G = _empty(n)
    for k, e in enumerate(edges):
        if not isinstance(e, (list, tuple)) or len(e) != 2 or not all(map(_is_int, e)):
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


def _matching(n: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    """A uniformly random perfect matching; with odd n the last node of the shuffle idles."""
    perm = rng.permutation(n)
    return [(int(a), int(b)) for a, b in zip(perm[0::2], perm[1::2], strict=False)]


def _round_rng(cfg: TopologyConfig, round: int) -> np.random.Generator:
    if round < 0:
        raise ValueError(f"round must be ≥ 0 (got {round})")
    return np.random.default_rng([cfg.seed, round])


def one_peer(cfg: TopologyConfig, round: int) -> nx.Graph:
    """Round ``round``'s random perfect matching: each client talks to at most one peer.

    Drawn from ``default_rng([seed, round])`` so any process can rebuild any round's graph
    without replaying earlier rounds.
    """
    G = _empty(cfg.n)
    G.add_edges_from(_matching(cfg.n, _round_rng(cfg, round)))
    return G


def two_peer(cfg: TopologyConfig, round: int) -> nx.Graph:
    """Union of two independent random matchings: each client has at most two peers."""
    rng = _round_rng(cfg, round)
    G = _empty(cfg.n)
    G.add_edges_from(_matching(cfg.n, rng))
    G.add_edges_from(_matching(cfg.n, rng))
    return G


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


def two_tier(cfg: TopologyConfig, assignment: dict[int, int]) -> nx.Graph:
    """Aggregators 0..A-1 on a complete overlay; each worker linked to its aggregator."""
    G = _empty(cfg.n)
    G.add_edges_from((a, b) for a in range(cfg.aggregators)
                     for b in range(a + 1, cfg.aggregators))
    G.add_edges_from(assignment.items())
    return G


STATIC_BUILDERS: dict[str, Callable[[TopologyConfig], nx.Graph]] = {
    "ring": ring,
    "path": path,
    "meshgrid": meshgrid,
    "torus": torus,
    "complete": complete,
    "star": star,
    "exponential": exponential,
    "erdos_renyi": erdos_renyi,
    "random_regular": random_regular,
    "edge_list": edge_list,
}
TIME_VARYING_BUILDERS: dict[str, Callable[[TopologyConfig, int], nx.Graph]] = {
    "one_peer": one_peer,
    "two_peer": two_peer,
}


# ---------------------------------------------------------------------------- Topology


def snapshot(G: nx.Graph, W: np.ndarray) -> RoundGraph:
    """The plain-Python view of ``G`` (nodes ``0..n-1``) with mixing matrix ``W`` (n×n)."""
    n = G.number_of_nodes()
    if W.shape != (n, n):
        raise ValueError(f"mixing matrix has shape {W.shape}, expected ({n}, {n})")
    neighbors = tuple(tuple(sorted(int(j) for j in G.adj[i] if j != i)) for i in range(n))
    weights = tuple({j: float(W[i, j]) for j in (*neighbors[i], i)} for i in range(n))
    return RoundGraph(n=n, neighbors=neighbors, weights=weights)


class Topology:
    """The communication graph of a run, possibly different in every round.

    The platform asks for :meth:`round_graph` in every phase of every round, so the
    networkx graph, its mixing matrix and the :class:`RoundGraph` snapshot are built once
    for static topologies and cached for the most recent round of time-varying ones.
    """

    def __init__(self, cfg: TopologyConfig, latency: Latency | None = None) -> None:
        validate(cfg)
        self.cfg = cfg
        # two_tier: each worker's aggregator, by the network model's latency
        self.assignment = nearest_aggregators(cfg.n, cfg.aggregators, latency) \
            if cfg.name == "two_tier" else None
        self.name = cfg.name
        self.n = cfg.n
        self.weights = cfg.weights
        self.time_varying = cfg.name in TIME_VARYING_BUILDERS
        self._round: int | None = None
        self._cached: tuple[nx.Graph, np.ndarray, RoundGraph] | None = None
        if not self.time_varying:
            G = two_tier(cfg, self.assignment) if self.assignment is not None \
                else STATIC_BUILDERS[cfg.name](cfg)
            if not nx.is_connected(G):
                k = nx.number_connected_components(G)
                raise ConfigError(
                    "topology",
                    f"{cfg.name} graph is disconnected (components: {k}); clients in "
                    "different components can never agree — add edges joining them",
                )
            W = mixing_matrix(G, cfg.weights)
            self._static = (G, W, snapshot(G, W))

    def _at(self, round: int) -> tuple[nx.Graph, np.ndarray, RoundGraph]:
        if not self.time_varying:
            return self._static
        if self._round != round or self._cached is None:
            G = TIME_VARYING_BUILDERS[self.name](self.cfg, round)
            W = mixing_matrix(G, self.weights)
            self._cached = (G, W, snapshot(G, W))
            self._round = round
        return self._cached

    def graph(self, round: int = 0) -> nx.Graph:
        """The networkx graph of ``round`` (the same object every round if static).

        Treat it as read-only: the cached mixing matrix and snapshot are derived from it.
        """
        return self._at(round)[0]

    def mixing_matrix(self, round: int = 0) -> np.ndarray:
        """The ``n×n`` mixing matrix of ``round`` under ``topology.weights``."""
        return self._at(round)[1]

    def diameter(self, round: int = 0) -> int:
        """Longest shortest path of the round's graph (static graphs are connected)."""
        return int(nx.diameter(self.graph(round)))

    def round_graph(self, round: int) -> RoundGraph:
        """The plain-Python view of ``round`` handed to strategies and the router."""
        return self._at(round)[2]

    def facts(self) -> GraphFacts:
        """What a strategy is built from: n, time-varying or not, diameter and degrees."""
        if self.time_varying:
            return GraphFacts(self.name, self.n, True, None, None)
        G = self.graph(0)
        tiers = None if self.assignment is None else tuple(
            self.assignment.get(v, v) for v in range(self.n))
        return GraphFacts(self.name, self.n, False, self.diameter(),
                          tuple(int(G.degree(i)) for i in range(self.n)), tiers)

    def __repr__(self) -> str:
        return f"Topology(name={self.name!r}, n={self.n}, time_varying={self.time_varying})"


def validate(cfg: TopologyConfig) -> None:
    """Check every field against its declared range (builders check their own fields)."""
    validate_fields(cfg, "topology")


def build_topology(cfg: TopologyConfig, latency: Latency | None = None) -> Topology:
    """Validate ``cfg`` and build its topology (static graphs are built and checked now);
    ``latency(i, j)`` in seconds places a two-tier graph's workers."""
    return Topology(cfg, latency)
