"""What the platform reads from any strategy's config: :class:`StrategyConfig`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the schedule's section lives with the inner loop that follows it
    from decent.strategies.local_training import LRScheduleConfig


@dataclass
class StrategyConfig:
    """The base of every strategy's ``Config``: the only questions the platform asks of a
    method's hyper-parameters. Each method declares its own fields and answers these from
    them; the defaults say that it has no batch and no inner schedule."""

    def examples_per_step(self) -> int:
        """The examples one optimisation step reads: what the compute clock charges a step
        by (6·N·b FLOPs, or b × the counted FLOPs of one example)."""
        return 1

    def inner_schedule(self) -> tuple[LRScheduleConfig, int] | None:
        """The inner learning-rate schedule and the inner steps a round takes (a schedule
        with ``total_steps: 0`` then spans the run); None: the method has none."""
        return None
