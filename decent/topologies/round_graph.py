"""The plain-Python view of one round's communication graph.

Strategies run unchanged on the local backend and inside Ray actors, so they must not
depend on networkx objects (heavy to pickle, easy to mutate by accident). A
:class:`RoundGraph` is an immutable snapshot of everything a strategy may ask about a
round: who its neighbours are, which mixing weights to use, and whether a send is legal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import networkx as nx
    import numpy as np


@dataclass(frozen=True)
class RoundGraph:
    """One round's undirected graph on clients ``0..n-1`` with its mixing weights.

    ``neighbors[i]`` lists the neighbours of ``i`` in increasing order, so iterating over
    them is deterministic on every backend. ``weights[i]`` maps each neighbour of ``i``
    *and ``i`` itself* to its mixing weight; each of these dicts sums to 1, so a gossip
    average ``x_i ← Σ_j w_ij x_j`` can be written straight from it.
    """

    n: int
    neighbors: tuple[tuple[int, ...], ...]
    weights: tuple[dict[int, float], ...]
    # Directed pairs (i, j) and (j, i) for every edge: the router checks every message
    # against this set, so membership must be O(1).
    _edges: frozenset[tuple[int, int]] = field(
        init=False, repr=False, compare=False, default=frozenset()
    )

    def __post_init__(self) -> None:
        if len(self.neighbors) != self.n or len(self.weights) != self.n:
            raise ValueError(
                f"RoundGraph with n={self.n} needs {self.n} neighbour lists and weight maps "
                f"(got {len(self.neighbors)} and {len(self.weights)})"
            )
        edges = frozenset((i, j) for i, nbrs in enumerate(self.neighbors) for j in nbrs)
        if any((j, i) not in edges for i, j in edges):
            raise ValueError("RoundGraph neighbour lists must describe an undirected graph")
        object.__setattr__(self, "_edges", edges)

    @classmethod
    def from_graph(cls, G: nx.Graph, W: np.ndarray) -> RoundGraph:
        """Snapshot ``G`` (nodes ``0..n-1``) with mixing matrix ``W`` (``n×n``)."""
        n = G.number_of_nodes()
        if W.shape != (n, n):
            raise ValueError(f"mixing matrix has shape {W.shape}, expected ({n}, {n})")
        neighbors = tuple(tuple(sorted(int(j) for j in G.adj[i] if j != i)) for i in range(n))
        weights = tuple({j: float(W[i, j]) for j in (*neighbors[i], i)} for i in range(n))
        return cls(n=n, neighbors=neighbors, weights=weights)

    def has_edge(self, src: int, dst: int) -> bool:
        """Whether ``src`` may send to ``dst`` this round (O(1))."""
        return (src, dst) in self._edges

    def degree(self, i: int) -> int:
        """Number of neighbours of client ``i`` this round."""
        return len(self.neighbors[i])

    def num_directed_edges(self) -> int:
        """Number of ordered pairs ``(i, j)`` that may exchange a message (2 × edges)."""
        return len(self._edges)
