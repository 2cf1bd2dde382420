"""Where a client's local steps, and its gossip average, may be computed together with
the other clients of its process.

A strategy's phase calls :func:`~decent.strategies.local_training.local_steps` (or
:func:`~decent.strategies.gossip.average_with_neighbours`) for one client, as in the
algorithm box. When the platform runs a process's clients batched (``execution.mode``),
it installs a *runner* here for the duration of a phase: the call then hands its request
(:class:`StepRequest`, :class:`MixRequest`) to the runner, which serves every client that
asked at once, stacked along a client axis, and returns this client's answer (its mean
loss; None for a mix, done in place). The strategy's code is the same in both modes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from decent.strategies.base import Client
    from decent.strategies.local_training import LocalTrainingConfig
    from decent.tasks.base import Task


@dataclass
class StepRequest:
    """The arguments of one client's ``local_steps`` call."""

    client: Client[Any]
    optimizer: torch.optim.Optimizer
    task: Task
    steps: int
    batch_size: int
    cfg: LocalTrainingConfig | None
    round_: int


@dataclass
class MixRequest:
    """θ_i ← keep · θ_i + Σ_j w_j θ_j over client i's trainable tensors: the neighbours'
    tensors ``payloads[j]`` (name → tensor), in source order."""

    client: Client[Any]
    keep: float
    weights: dict[int, float]
    payloads: dict[int, dict[str, torch.Tensor]]


StepRunner = Callable[[StepRequest | MixRequest], Any]
_runner: StepRunner | None = None


def install(runner: StepRunner | None) -> StepRunner | None:
    """Make ``runner`` take the local steps from now on (None: each call takes its own);
    the runner it replaces."""
    global _runner
    previous, _runner = _runner, runner
    return previous


def runner() -> StepRunner | None:
    return _runner
