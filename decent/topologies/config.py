"""The ``topology`` section of a run config and the names of the graphs it can ask for."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from decent.core.errors import ConfigError
from decent.core.schema import at_least, in_range, one_of, seed_field
from decent.topologies.mixing import MIXING_KINDS

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


@dataclass(frozen=True)
class TopologyConfig:
    """The ``topology`` section of a run config.

    Only the fields the chosen ``name`` uses are read: ``p`` for ``erdos_renyi``,
    ``degree`` for ``random_regular``, ``rows`` for ``meshgrid``/``torus``, ``edges`` for
    ``edge_list``; ``seed`` for every random graph.
    """

    # the graph; one_peer and two_peer are redrawn every round
    name: str = one_of(TOPOLOGIES, "ring")
    n: int = at_least(1, 16)  # ≥ 2 except for `complete` (n = 1: a single client)
    seed: int = seed_field(0)  # seeds the random graphs (erdos_renyi, random_regular, one/two_peer)
    p: float = in_range(0.3, 0, 1, lo_open=True)  # erdos_renyi: the probability of each edge
    degree: int = at_least(1, 3)  # random_regular: every client's number of neighbours
    # meshgrid and torus: rows of the grid; None: the most square shape
    rows: int | None = at_least(2, None, nullable=True)
    edges: list | None = None  # checked pair by pair when the graph is built
    aggregators: int = at_least(1, 8)  # two_tier: vertices 0..A-1 aggregate, the rest work
    # the mixing matrix W: Metropolis-Hastings, or uniform over each neighbourhood
    weights: str = one_of(MIXING_KINDS, "metropolis")

    def validate(self, prefix: str = "topology") -> None:
        # A single client (centralised baselines such as plain MeZO) is a complete graph.
        least = 1 if self.name == "complete" else 2
        if not is_int(self.n) or self.n < least:
            raise ConfigError(f"{prefix}.n", f"{self.name} needs an integer number of "
                              f"clients n ≥ {least} (got {self.n!r})")
        if self.name == "two_tier" and self.aggregators >= self.n:
            raise ConfigError(f"{prefix}.aggregators",
                              f"must be below n = {self.n}, so that some vertices are "
                              f"workers (got {self.aggregators})")


def is_int(x: object) -> bool:
    """An integer from YAML or numpy, not a bool (which Python counts as one)."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)
