"""The :class:`Topology` the platform runs on: the graph of each round, its mixing matrix
and the plain-Python :class:`RoundGraph` snapshot handed to strategies and the router."""

from __future__ import annotations

from typing import Any

import networkx as nx
import numpy as np

from decent.core.errors import ConfigError
from decent.core.graph import GraphFacts, RoundGraph
from decent.core.schema import validate_fields
from decent.topologies.builders import TOPOLOGIES
from decent.topologies.config import TopologyConfig, TwoTierConfig
from decent.topologies.mixing import mixing_matrix
from decent.topologies.two_tier import Latency, nearest_aggregators, two_tier


def snapshot(G: nx.Graph, W: np.ndarray) -> RoundGraph:
    """The plain-Python view of ``G`` (nodes ``0..n-1``) with mixing matrix ``W`` (n×n):
    a row of ``W`` per client on an undirected graph; on a directed one, the column of
    the push matrix (what client i keeps and sends to each out-neighbour)."""
    n = G.number_of_nodes()
    if W.shape != (n, n):
        raise ValueError(f"mixing matrix has shape {W.shape}, expected ({n}, {n})")
    neighbors = tuple(tuple(sorted(int(j) for j in G.adj[i] if j != i)) for i in range(n))
    directed = G.is_directed()
    M = W.T if directed else W
    weights = tuple({j: float(M[i, j]) for j in (*neighbors[i], i)} for i in range(n))
    return RoundGraph(n=n, neighbors=neighbors, weights=weights, directed=directed)


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
            if isinstance(cfg, TwoTierConfig) else None
        self.name = cfg.name
        self.n = cfg.n
        self.weights = cfg.weights
        self.time_varying = bool(getattr(cfg, "TIME_VARYING", False))
        self._build = TOPOLOGIES.entry(cfg.name).build
        self._round: int | None = None
        self._cached: tuple[nx.Graph, np.ndarray, RoundGraph] | None = None
        if not self.time_varying:
            G = two_tier(cfg, self.assignment) if isinstance(cfg, TwoTierConfig) \
                else self._build(cfg)
            if not nx.is_weakly_connected(G) if G.is_directed() else not nx.is_connected(G):
                k = (nx.number_weakly_connected_components(G) if G.is_directed()
                     else nx.number_connected_components(G))
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
            G = self._build(self.cfg, round)
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

    def diameter(self, round: int = 0) -> int | None:
        """Longest shortest path of the round's graph (static undirected graphs are
        connected); on a directed graph along its edges' direction, None where some
        client cannot reach another."""
        G = self.graph(round)
        if G.is_directed() and not nx.is_strongly_connected(G):
            return None
        return int(nx.diameter(G))

    @property
    def directed(self) -> bool:
        return bool(self.graph(0).is_directed())

    def strongly_connected(self) -> bool | None:
        """Whether every client reaches every other along directed edges: in the static
        graph, or in the union of one period of a time-varying graph's rounds (None:
        a time-varying graph with no period); undirected graphs are connected."""
        if not self.directed:
            return True
        if not self.time_varying:
            return bool(nx.is_strongly_connected(self.graph(0)))
        period = getattr(self.cfg, "period", None)
        if period is None:
            return None
        union = nx.DiGraph()
        for r in range(period()):
            union.add_edges_from(self.graph(r).edges)
        union.add_nodes_from(range(self.n))
        return bool(nx.is_strongly_connected(union))

    def round_graph(self, round: int) -> RoundGraph:
        """The plain-Python view of ``round`` handed to strategies and the router."""
        return self._at(round)[2]

    def facts(self) -> GraphFacts:
        """What a strategy is built from: n, time-varying or not, diameter and degrees."""
        directed = self.directed
        strong = self.strongly_connected() if directed else None
        if self.time_varying:
            return GraphFacts(self.name, self.n, True, None, None, directed=directed,
                              strongly_connected=strong)
        G = self.graph(0)
        tiers = None if self.assignment is None else tuple(
            self.assignment.get(v, v) for v in range(self.n))
        degree = G.out_degree if directed else G.degree
        return GraphFacts(self.name, self.n, False, self.diameter(),
                          tuple(int(degree(i)) for i in range(self.n)), tiers,
                          directed=directed, strongly_connected=strong)

    def __repr__(self) -> str:
        return f"Topology(name={self.name!r}, n={self.n}, time_varying={self.time_varying})"


def validate(cfg: TopologyConfig) -> None:
    """Check every field against its declared range (builders check their own fields)."""
    validate_fields(cfg, "topology")


def build_topology(cfg: TopologyConfig | dict[str, Any], latency: Latency | None = None
                   ) -> Topology:
    """Validate ``cfg`` (a config, or a ``topology`` section such as ``{name: ring, n: 8}``)
    and build its topology (static graphs are built and checked now); ``latency(i, j)`` in
    seconds places a two-tier graph's workers."""
    if isinstance(cfg, dict):
        cfg = TOPOLOGIES.config(cfg)
    elif type(cfg) is TopologyConfig and TOPOLOGIES.entry(cfg.name).config is not TopologyConfig:
        # the common fields naming a graph with fields of its own (a random or
        # time-varying one): that graph's config, its own fields at their defaults
        cfg = TOPOLOGIES.config({"name": cfg.name, "n": cfg.n, "weights": cfg.weights})
    return Topology(cfg, latency)
