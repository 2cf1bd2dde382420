"""The ``topology`` section of a run config: the fields every graph has, and each graph's
own (a field the chosen graph does not declare is refused, not silently ignored).

Each graph registers its config class with its builder in
:data:`decent.topologies.builders.TOPOLOGIES`; a user's module (``imports:``) may add one
the same way, with a config class that subclasses :class:`TopologyConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from decent.core.errors import ConfigError
from decent.core.schema import at_least, in_range, one_of, seed_field, text
from decent.topologies.mixing import MIXING_KINDS


@dataclass(frozen=True)
class TopologyConfig:
    """What every graph's section holds (ring, path, complete, star and exponential need
    nothing more)."""

    # True: the graph is redrawn every round (its builder takes the round too)
    TIME_VARYING: ClassVar[bool] = False

    # the graph (`decent config schema topology` lists them); one_peer and two_peer are
    # redrawn every round
    name: str = text("ring", nullable=False)
    n: int = at_least(1, 16)  # ≥ 2 except for `complete` (n = 1: a single client)
    # the mixing matrix W: Metropolis-Hastings, or uniform over each neighbourhood
    weights: str = one_of(MIXING_KINDS, "metropolis")

    def validate(self, prefix: str = "topology") -> None:
        # A single client (centralised baselines such as plain MeZO) is a complete graph.
        least = 1 if self.name == "complete" else 2
        if not is_int(self.n) or self.n < least:
            raise ConfigError(f"{prefix}.n", f"{self.name} needs an integer number of "
                              f"clients n ≥ {least} (got {self.n!r})")


@dataclass(frozen=True)
class RandomTopologyConfig(TopologyConfig):
    """A graph drawn at random: repeated edge for edge from its seed."""

    seed: int = seed_field(0)  # seeds the graph's draws


@dataclass(frozen=True)
class ErdosRenyiConfig(RandomTopologyConfig):
    p: float = in_range(0.3, 0, 1, lo_open=True)  # the probability of each edge


@dataclass(frozen=True)
class RandomRegularConfig(RandomTopologyConfig):
    degree: int = at_least(1, 3)  # every client's number of neighbours


@dataclass(frozen=True)
class MatchingConfig(RandomTopologyConfig):
    """one_peer / two_peer: fresh random matchings every round."""

    TIME_VARYING: ClassVar[bool] = True


@dataclass(frozen=True)
class GridConfig(TopologyConfig):
    """meshgrid and torus."""

    # rows of the grid; None: the most square shape
    rows: int | None = at_least(2, None, nullable=True)


@dataclass(frozen=True)
class EdgeListConfig(TopologyConfig):
    edges: list | None = None  # [[i, j], ...]: checked pair by pair when the graph is built


@dataclass(frozen=True)
class TwoTierConfig(TopologyConfig):
    aggregators: int = at_least(1, 8)  # vertices 0..A-1 aggregate, the rest work

    def validate(self, prefix: str = "topology") -> None:
        super().validate(prefix)
        if self.aggregators >= self.n:
            raise ConfigError(f"{prefix}.aggregators",
                              f"must be below n = {self.n}, so that some vertices are "
                              f"workers (got {self.aggregators})")


def is_int(x: object) -> bool:
    """An integer from YAML or numpy, not a bool (which Python counts as one)."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)
