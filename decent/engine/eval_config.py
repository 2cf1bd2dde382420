"""The ``eval`` section of a run config: when and what to evaluate, a target to reach,
and the selection of a checkpoint on validation (:mod:`decent.engine.config`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from decent.core.errors import ConfigError
from decent.core.schema import at_least, number, one_of, text

TARGET_MODES = ("auto", "max", "min")
SELECTIONS = ("none", "val_loss")



@dataclass
class TargetConfig:
    """A value of an evaluated metric to reach: the summary reports when it first is."""

    metric: str | None = text()  # e.g. gmp_accuracy; None: no target
    value: float = number(0.0)  # the value of `metric` to reach
    # max: reached when metric ≥ value; min: when ≤; auto: min for losses, perplexities and
    # distances, max otherwise
    mode: str = one_of(TARGET_MODES, "auto")


@dataclass
class EvalConfig:
    every: int = at_least(0, 5)  # evaluate every k rounds (and after the last); 0 = at the end
    per_client: bool = True  # also each client's own accuracy (costs n evaluations)
    # also the starting model, before round 0: the summary's initial_<metric> (a zero-shot
    # baseline measured on the run's own test set)
    initial: bool = False
    # a metric value to reach: the summary reports when it first was
    target: TargetConfig = field(default_factory=TargetConfig)
    # the averaged model (gmp_*) and the per-client metrics over the honest clients only,
    # faults.byzantine left out (the robust-learning literature's figure)
    honest_only: bool = False
    # val_loss: each evaluation also scores the averaged model on the task's validation
    # split (val_loss, val_accuracy), and the summary reports the evaluation of lowest
    # val_loss and its test figures (selected_*): the MeZO/SeedFlood protocol's checkpoint
    select: str = one_of(SELECTIONS, "none")


def check_selection(cfg: Any) -> None:
    """``eval.select`` needs a task with a validation split: refused in one line."""
    if cfg.eval.select != "none" and not getattr(cfg.task, "num_val", 0):
        raise ConfigError("eval.select", f"{cfg.eval.select} scores a validation split, and "
                          f"task {cfg.task.name} has none here: use a prompted task with "
                          "task.num_val > 0, or eval.select none")
