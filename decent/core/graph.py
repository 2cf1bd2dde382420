"""Plain-Python views of the communication graph: what a strategy may know of it.

Strategies run unchanged on the local backend and inside Ray actors, so they must not
depend on networkx objects (heavy to pickle, easy to mutate by accident).

* :class:`GraphFacts` — what a strategy is built from, once per process: n, whether the
  graph changes every round, its diameter and degrees (static graphs).
* :class:`RoundGraph` — an immutable snapshot of one round: who each client's neighbours
  are, which mixing weights to use, and whether a send is legal.

Both are made by :mod:`decent.topologies` (which uses networkx); nothing here imports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class GraphFacts:
    """The facts of a run's graph that a strategy may need at construction.

    ``diameter`` and ``degrees`` describe the static graph; for a graph redrawn every
    round (``time_varying``) they are None, since no single graph describes the run."""

    name: str
    n: int
    time_varying: bool
    diameter: int | None
    degrees: tuple[int, ...] | None
    # two_tier: the aggregator of every vertex (an aggregator is its own); else None
    tiers: tuple[int, ...] | None = None
    # directed graphs: a message may cross an edge one way only (push-sum methods)
    directed: bool = False
    # directed graphs: whether every client reaches every other along directed edges (a
    # time-varying graph: over one period of its rounds); None where it is not known
    strongly_connected: bool | None = None

    def is_star(self, center: int = 0) -> bool:
        """Whether the static graph is a star with its hub at ``center``."""
        if self.degrees is None or self.n < 2:
            return False
        return self.degrees[center] == self.n - 1 and all(
            d == 1 for i, d in enumerate(self.degrees) if i != center)


@dataclass(frozen=True)
class RoundGraph:
    """One round's graph on clients ``0..n-1`` with its mixing weights.

    ``neighbors[i]`` lists the clients ``i`` may send to, in increasing order, so iterating
    over them is deterministic on every backend; ``in_neighbors[i]`` those that may send
    to ``i``. On an undirected graph the two are the same. ``weights[i]`` maps each
    neighbour of ``i`` *and ``i`` itself* to its mixing weight; each of these dicts sums
    to 1. Undirected: the row of a symmetric mixing matrix, so a gossip average
    ``x_i ← Σ_j w_ij x_j`` can be written straight from it. Directed: the shares of
    ``i``'s mass that ``i`` keeps and pushes to each out-neighbour (a column of a
    column-stochastic matrix), which is what push-sum sends.
    """

    n: int
    neighbors: tuple[tuple[int, ...], ...]
    weights: tuple[dict[int, float], ...]
    directed: bool = False
    # Directed pairs (i, j) that may carry a message (both ways for an undirected edge):
    # the router checks every message against this set, so membership must be O(1).
    _edges: frozenset[tuple[int, int]] = field(
        init=False, repr=False, compare=False, default=frozenset()
    )
    in_neighbors: tuple[tuple[int, ...], ...] = field(init=False, compare=False, default=())

    def __post_init__(self) -> None:
        if len(self.neighbors) != self.n or len(self.weights) != self.n:
            raise ValueError(
                f"RoundGraph with n={self.n} needs {self.n} neighbour lists and weight maps "
                f"(got {len(self.neighbors)} and {len(self.weights)})"
            )
        edges = frozenset((i, j) for i, nbrs in enumerate(self.neighbors) for j in nbrs)
        if not self.directed and any((j, i) not in edges for i, j in edges):
            raise ValueError("RoundGraph neighbour lists must describe an undirected graph")
        object.__setattr__(self, "_edges", edges)
        senders: list[list[int]] = [[] for _ in range(self.n)]
        for i, j in sorted(edges):
            senders[j].append(i)
        object.__setattr__(self, "in_neighbors", tuple(tuple(s) for s in senders))

    def has_edge(self, src: int, dst: int) -> bool:
        """Whether ``src`` may send to ``dst`` this round (O(1))."""
        return (src, dst) in self._edges

    def degree(self, i: int) -> int:
        """Number of neighbours of client ``i`` this round."""
        return len(self.neighbors[i])

    def num_directed_edges(self) -> int:
        """Number of ordered pairs ``(i, j)`` that may carry a message (2 × edges on an
        undirected graph)."""
        return len(self._edges)
