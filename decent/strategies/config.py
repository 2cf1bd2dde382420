"""What the platform reads from any strategy's config: :class:`StrategyConfig`, and the
inner learning-rate schedule it may name (:class:`LRScheduleConfig`, here rather than
beside the inner loop that follows it, so that this module imports nothing of the
strategies)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from decent.core.schema import at_least, in_range, one_of

SCHEDULES = ("constant", "cosine")


@dataclass
class LRScheduleConfig:
    """The inner learning rate over a worker's inner steps t = round · H + i (i-th step of
    the round): a linear warm-up over the first ``warmup_steps`` steps, then constant or a
    cosine decay to ``min_lr_ratio`` · lr at ``total_steps`` (0: the run's rounds ×
    local_steps, filled in when the config is loaded). DiLoCo's recipe (Douillard et al.,
    2023, §3) is a warm-up then cosine decay. The factor is a function of t alone, so a
    resumed run continues the schedule with nothing extra in a checkpoint."""

    # constant after the warm-up, or cosine decay to min_lr_ratio · lr
    name: str = one_of(SCHEDULES, "constant")
    warmup_steps: int = at_least(0, 0)  # inner steps of linear warm-up from 0 to lr
    # the schedule's length in inner steps; 0: the run's (rounds × local_steps)
    total_steps: int = at_least(0, 0)
    min_lr_ratio: float = in_range(0.0, 0, 1)  # cosine: the final learning rate as a fraction of lr

    def factor(self, t: int) -> float:
        if t < self.warmup_steps:  # (t + 1) / W: the first step already moves
            return (t + 1) / self.warmup_steps
        if self.name == "constant":
            return 1.0
        span = max(self.total_steps - self.warmup_steps, 1)
        progress = min((t - self.warmup_steps) / span, 1.0)
        cosine = 0.5 * (1 + math.cos(math.pi * progress))
        return self.min_lr_ratio + (1 - self.min_lr_ratio) * cosine

    @property
    def active(self) -> bool:
        return self.name != "constant" or self.warmup_steps > 0



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
