"""Random graphs: Erdős–Rényi and random regular graphs drawn once from ``topology.seed``
(redrawn until connected), and the one-peer / two-peer matchings drawn afresh each round.
A run is repeated edge for edge from its seed.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import networkx as nx
import numpy as np

from decent.core.errors import ConfigError
from decent.topologies.config import (
    ErdosRenyiConfig,
    RandomRegularConfig,
    RandomTopologyConfig,
)
from decent.topologies.shapes import empty_graph

# Random graphs are redrawn (seed, seed+1, ...) until connected, at most this many times.
MAX_DRAWS = 100


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


def erdos_renyi(cfg: ErdosRenyiConfig) -> nx.Graph:
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


def random_regular(cfg: RandomRegularConfig) -> nx.Graph:
    """Uniform random ``degree``-regular graph, redrawn until connected."""
    n, d = cfg.n, cfg.degree  # degree < n and n·degree even: RandomRegularConfig.validate
    return _connected_draw(
        lambda s: nx.random_regular_graph(d, n, seed=s),
        cfg.seed,
        "topology.degree",
        f"degree={d} gave no connected graph on n={n} nodes in {MAX_DRAWS} draws; use degree ≥ 3",
    )


def _matching(n: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    """A uniformly random perfect matching; with odd n the last node of the shuffle idles."""
    perm = rng.permutation(n)
    return [(int(a), int(b)) for a, b in zip(perm[0::2], perm[1::2], strict=False)]


def _round_rng(cfg: RandomTopologyConfig, round: int) -> np.random.Generator:
    if round < 0:
        raise ValueError(f"round must be ≥ 0 (got {round})")
    return np.random.default_rng([cfg.seed, round])


def one_peer(cfg: RandomTopologyConfig, round: int) -> nx.Graph:
    """Round ``round``'s random perfect matching: each client talks to at most one peer.

    Drawn from ``default_rng([seed, round])`` so any process can rebuild any round's graph
    without replaying earlier rounds.
    """
    G = empty_graph(cfg.n)
    G.add_edges_from(_matching(cfg.n, _round_rng(cfg, round)))
    return G


def two_peer(cfg: RandomTopologyConfig, round: int) -> nx.Graph:
    """Union of two independent random matchings: each client has at most two peers."""
    rng = _round_rng(cfg, round)
    G = empty_graph(cfg.n)
    G.add_edges_from(_matching(cfg.n, rng))
    G.add_edges_from(_matching(cfg.n, rng))
    return G
