"""One client's two-point zeroth-order estimate, as a toolkit call that batched execution
can serve for a whole chunk of clients at once.

A ZO strategy calls :func:`zo_estimate` for one client, as in its algorithm box. Where the
platform runs a process's clients batched (``execution.mode``), the phase context carries
a runner (``ctx.runner``); the call, given it, hands its :class:`EstimateRequest` to that
runner, which evaluates every waiting client's ±ε losses in one computation
(``decent.engine.stacked_zo``) and returns this client's answer. Without a runner the
estimate is computed here, exactly as the estimator defines it. The strategy's code reads
the same in both modes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from decent.strategies.base import StepRunner
from decent.zo.estimators import DenseMeZO, InPlaceMeZO, Replica, SubCGE

if TYPE_CHECKING:
    from decent.strategies.base import Client
    from decent.tasks.base import Task

Estimator = DenseMeZO | InPlaceMeZO | SubCGE


@dataclass
class EstimateRequest:
    """The arguments of one client's two-point estimate at its model's current point."""

    client: Client[Any]
    estimator: Estimator
    replica: Replica
    task: Task
    batch: tuple[torch.Tensor, ...]
    seed: int
    eps: float


def zo_estimate(client: Client[Any], estimator: Estimator, replica: Replica, task: Task,
                batch: tuple[torch.Tensor, ...], seed: int, eps: float,
                runner: StepRunner | None = None) -> tuple[float, list[float]]:
    """α = (ℓ(θ+εz) − ℓ(θ−εz)) / 2ε of ``client``'s model for the perturbation of
    ``seed``, with ℓ the task's loss on ``batch``: α and the two losses (+ε first).
    ``runner``: the phase context's (``ctx.runner``) in a batched process."""
    request = EstimateRequest(client, estimator, replica, task, batch, seed, eps)
    if runner is None:
        return estimate_alone(request)
    answer: tuple[float, list[float]] = runner(request)  # type: ignore[arg-type]
    return answer


@torch.no_grad()
def estimate_alone(request: EstimateRequest) -> tuple[float, list[float]]:
    """One client's estimate as sequential mode computes it."""
    model, task, batch = request.client.model, request.task, request.batch
    losses: list[float] = []

    def loss_fn() -> float:
        losses.append(float(task.loss(model, batch)))
        return losses[-1]

    alpha = request.estimator.estimate(model, request.replica, loss_fn,  # type: ignore[arg-type]
                                       request.seed, request.eps)
    return alpha, losses
