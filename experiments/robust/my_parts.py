"""A robust rule and an attack of a user's own, registered as decent's are: name them in a
run's ``imports:`` and select them by name (``strategy.robust``, ``faults.attack``).

    decent run experiments/quickstart.yaml imports=[experiments/robust/my_parts.py] \
        strategy.robust.name=norm_filtered_mean faults.byzantine=[3,11] \
        faults.attack.name=mimic
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from decent.strategies.api import (
    AGGREGATORS,
    ATTACKS,
    AggregatorConfig,
    AttackConfig,
    AttackView,
    positive,
    storable,
)


@dataclass
class NormFilteredMeanConfig(AggregatorConfig):
    name: str = "norm_filtered_mean"
    factor: float = positive(2.0)  # vectors longer than factor × the median norm are dropped


def norm_filtered_mean(stacked: torch.Tensor, factor: float) -> torch.Tensor:
    """The mean of the vectors (rows) whose norm is at most factor × the median norm."""
    norms = torch.linalg.vector_norm(stacked.double(), dim=1)
    keep = norms <= factor * norms.median()
    return stacked.double()[keep].mean(dim=0).to(stacked.dtype)


AGGREGATORS.register("norm_filtered_mean", NormFilteredMeanConfig,
                     lambda cfg: lambda stacked: norm_filtered_mean(stacked, cfg.factor))


@storable
@dataclass
class MimicConfig(AttackConfig):
    """Send what one honest neighbour of the destination sent it (Karimireddy et al.,
    2022's mimic: it over-represents one client's data)."""

    OMNISCIENT: ClassVar[bool] = True
    name: str = "mimic"


def mimic(cfg: MimicConfig, view: AttackView) -> list[torch.Tensor] | None:
    """The payload's float values (``view.honest[k]``: what k sent, as a list of tensors)."""
    if not view.honest:
        return None  # nobody to copy: the payload stays as it was
    return [t.clone() for t in view.honest[min(view.honest)]]


ATTACKS.register("mimic", MimicConfig, mimic)
