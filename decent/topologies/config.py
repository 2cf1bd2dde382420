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
from decent.topologies.grid import grid_shape
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
    # clients; a ring and an exponential graph need ≥ 3, `complete` takes 1 (a single
    # client), every other graph ≥ 2
    n: int = at_least(1, 16)
    # the mixing matrix W: Metropolis-Hastings, or uniform over each neighbourhood
    weights: str = one_of(MIXING_KINDS, "metropolis")

    def validate(self, prefix: str = "topology") -> None:
        if not is_int(self.n):
            raise ConfigError(f"{prefix}.n", f"expected a whole number of clients, e.g. "
                              f"{prefix}.n=16 (got {self.n!r})")
        least, what = SMALLEST.get(self.name, (2, f"a {self.name} graph"))
        if self.n < least:
            fix = {1: "one client", 2: "two clients"}.get(self.n, f"{self.n} clients")
            raise ConfigError(f"{prefix}.n", f"{what} needs at least {least} clients (got "
                              f"{self.n}); for {fix} use {prefix}.name=complete")


# The fewest clients a graph is itself with. Below it the rule collapses: on a ring (and an
# exponential graph) of two, a client's two neighbours are the same one, so the "ring" is
# a single edge with degree 1, which the formulas for rings do not describe; a star needs
# its hub and at least one leaf. `complete` on one client is a centralised baseline (plain
# MeZO). Graphs not listed need 2; a grid's sides are checked by GridConfig.
SMALLEST: dict[str, tuple[int, str]] = {
    "ring": (3, "a ring"),
    "exponential": (3, "an exponential graph"),
    "star": (2, "a star (a hub and at least one leaf)"),
    "complete": (1, "a complete graph"),
}


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

    def validate(self, prefix: str = "topology") -> None:
        super().validate(prefix)
        d, n = self.degree, self.n
        if d >= n:
            raise ConfigError(f"{prefix}.degree", f"random_regular needs degree < n={n}: a "
                              f"client has only {n - 1} others to link to (got {d})")
        if (n * d) % 2:
            near = " or ".join(str(k) for k in (d - 1, d + 1) if 1 <= k < n)
            raise ConfigError(f"{prefix}.degree", f"random_regular needs n·degree even; "
                              f"{n}·{d} is odd — use degree {near}, or an even n")


@dataclass(frozen=True)
class MatchingConfig(RandomTopologyConfig):
    """one_peer / two_peer: fresh random matchings every round."""

    TIME_VARYING: ClassVar[bool] = True


@dataclass(frozen=True)
class GridConfig(TopologyConfig):
    """meshgrid and torus."""

    # rows of the grid; None: the most square shape
    rows: int | None = at_least(2, None, nullable=True)

    def validate(self, prefix: str = "topology") -> None:
        super().validate(prefix)
        # a torus side of 2 wraps onto itself (double edges), a grid side of 1 is a path
        grid_shape(self.name, self.n, self.rows, 3 if self.name == "torus" else 2, prefix)


@dataclass(frozen=True)
class EdgeListConfig(TopologyConfig):
    edges: list | None = None  # [[i, j], ...]: checked pair by pair when the graph is built
    # true: each [i, j] lets i send to j only (a directed graph, which mixes by uniform
    # out-shares whatever `weights` says: push-sum methods run on it)
    directed: bool = False


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
