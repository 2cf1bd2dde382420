"""Directed graphs, on which a message crosses an edge one way only: what push-sum methods
(SGP, OSGP) gossip over.

* ``directed_ring``: i → i + 1.
* ``directed_exponential``: i → i + 2^k for k = 0 … ⌊log₂(n − 1)⌋ (mod n): the static
  directed exponential graph of the SGP paper (Assran et al., 2019, §6) and of BlueFog's
  ``ExponentialTwoGraph``.
* ``one_peer_exponential``: one out-peer per round, cycling through the offsets
  +1, −1, +2, −2, …, +2^K, −2^K (K = ⌊log₂(n − 1)⌋): every client sends to i + offset(t)
  in round t. The order is that of the authors' ``DynamicDirectedExponentialGraph``
  (facebookresearch/stochastic_gradient_push, ``gossip/graph_manager.py``: each rank's
  phone book lists the forward then the backward peer of each power of two, and one
  peer per iteration is taken in turn).
* ``edge_list`` with ``directed: true`` (:mod:`decent.topologies.shapes`).

Mixing on a directed graph is column-stochastic: client i keeps 1/(d_i + 1) of its mass
and pushes 1/(d_i + 1) to each of its d_i out-neighbours (the authors' ``UniformMixing``,
``gossip/mixing_manager.py``), which needs no knowledge of anyone else's degree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import networkx as nx
import numpy as np

from decent.topologies.config import TopologyConfig


@dataclass(frozen=True)
class DirectedConfig(TopologyConfig):
    """A directed graph's section. It mixes by uniform out-shares whatever ``weights``
    says (Metropolis weights are for undirected graphs): the one push-sum uses."""


@dataclass(frozen=True)
class OnePeerExponentialConfig(DirectedConfig):
    """One out-peer per round, cycling through ±2^k."""

    TIME_VARYING: ClassVar[bool] = True

    def period(self) -> int:
        """Rounds after which the sequence of graphs repeats."""
        return len(offsets(self.n))


def exponents(n: int) -> range:
    """k = 0 … ⌊log₂(n − 1)⌋: the powers of two a directed exponential graph hops."""
    return range(int(math.log2(n - 1)) + 1) if n > 1 else range(0)


def offsets(n: int) -> list[int]:
    """+1, −1, +2, −2, …: the one-peer exponential graph's offsets, round by round."""
    return [sign * 2 ** k for k in exponents(n) for sign in (1, -1)]


def from_offsets(n: int, hops: list[int]) -> nx.DiGraph:
    """i → i + h (mod n) for every hop h; nodes 0..n-1, no self-loop."""
    G = nx.DiGraph()
    G.add_nodes_from(range(n))
    G.add_edges_from((i, (i + h) % n) for i in range(n) for h in hops if (i + h) % n != i)
    return G


def directed_ring(cfg: TopologyConfig) -> nx.DiGraph:
    return from_offsets(cfg.n, [1])


def directed_exponential(cfg: TopologyConfig) -> nx.DiGraph:
    return from_offsets(cfg.n, [2 ** k for k in exponents(cfg.n)])


def one_peer_exponential(cfg: OnePeerExponentialConfig, round_: int) -> nx.DiGraph:
    hops = offsets(cfg.n)
    return from_offsets(cfg.n, [hops[round_ % len(hops)]])


def push_spectral_gap(P: np.ndarray) -> float:
    """1 − |λ₂| of a column-stochastic P: the rate at which push-sum's de-biased values
    agree (0 when some clients never hear from others)."""
    if P.shape[0] < 2:
        return 1.0
    magnitudes = np.sort(np.abs(np.linalg.eigvals(P)))[::-1]
    gap = 1.0 - float(magnitudes[1])
    return 0.0 if abs(gap) < 1e-12 else gap
