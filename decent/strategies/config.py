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
    the round): a linear warm-up from ``warmup_start_ratio`` · lr to lr over the first
    ``warmup_steps`` steps, then constant or a cosine decay to ``min_lr_ratio`` · lr at
    ``total_steps`` (0: the run's rounds × local_steps, filled in when the config is
    loaded). DiLoCo's recipe (Douillard et al., 2023, §3) is a warm-up from 0 then cosine
    decay; SPES's authors' scheduler starts its warm-up at 0.1 · lr. The factor is a
    function of t alone, so a resumed run continues the schedule with nothing extra in a
    checkpoint."""

    # constant after the warm-up, or cosine decay to min_lr_ratio · lr
    name: str = one_of(SCHEDULES, "constant")
    # inner steps of linear warm-up from warmup_start_ratio · lr to lr
    warmup_steps: int = at_least(0, 0)
    # where the warm-up's line starts, as a fraction of lr (0: from 0)
    warmup_start_ratio: float = in_range(0.0, 0, 1, hi_open=True)
    # the schedule's length in inner steps; 0: the run's (rounds × local_steps)
    total_steps: int = at_least(0, 0)
    min_lr_ratio: float = in_range(0.0, 0, 1)  # cosine: the final learning rate as a fraction of lr

    def factor(self, t: int) -> float:
        if t < self.warmup_steps:
            # r + (1 − r)(t + 1)/W: the first step already moves off the start r, and step
            # W − 1 reaches lr. Counting steps from 1 (s = t + 1) this is the line
            # r + (1 − r)·s/W of OLMo's scheduler, which SPES's authors use
            # (zjr2000/SPES spes/optim.py, Scheduler._linear_warmup; its trainer bumps
            # global_step before the step, so its first step runs at s = 1)
            start = self.warmup_start_ratio
            return start + (1 - start) * (t + 1) / self.warmup_steps
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
