"""Where a client's local steps, and its gossip average, may be computed together with
the other clients of its process.

A strategy's phase calls :func:`~decent.strategies.local_training.local_steps` (or
:func:`~decent.strategies.gossip.average_with_neighbours`) for one client, as in the
algorithm box. When the platform runs a process's clients batched (``execution.mode``),
the phase context carries a *runner* (``ctx.runner``, the process's batcher): the call,
given it, hands its request (:class:`StepRequest`, :class:`MixRequest`, a zeroth-order
estimate) to the runner, which serves every client that asked at once, stacked along a
client axis, and returns this client's answer (its mean loss; None for a mix, done in
place). The strategy's code is the same in both modes; nothing is installed in a module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from decent.strategies.base import Client
    from decent.strategies.config import StrategyConfig
    from decent.tasks.base import Task


@dataclass
class StepRequest:
    """The arguments of one client's ``local_steps`` call."""

    client: Client[Any]
    optimizer: torch.optim.Optimizer
    task: Task
    steps: int
    batch_size: int
    # the method's LocalTrainingConfig, typed by its base: local_training imports this
    # module, so naming its class here would close an import circle
    cfg: StrategyConfig | None
    round_: int


@dataclass
class MixRequest:
    """θ_i ← keep · θ_i + Σ_j w_j θ_j over client i's trainable tensors: the neighbours'
    tensors ``payloads[j]`` (name → tensor), in source order."""

    client: Client[Any]
    keep: float
    weights: dict[int, float]
    payloads: dict[int, dict[str, torch.Tensor]]


