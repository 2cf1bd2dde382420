"""Local optimisation steps shared by the first-order strategies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from decent.core.errors import ConfigError
from decent.core.schema import at_least, in_range, one_of, positive
from decent.strategies.base import Client
from decent.tasks.base import Task

OPTIMIZERS = ("sgd", "adamw")


@dataclass
class LocalTrainingConfig:
    """Hyper-parameters of a client's inner loop (fields shared by many strategies).

    In every strategy ``lr``, ``momentum`` and ``weight_decay`` are the inner optimiser's;
    outer steps have their own ``outer_*`` fields."""

    local_steps: int = at_least(1, 5)
    batch_size: int = at_least(1, 8)
    optimizer: str = one_of(OPTIMIZERS, "sgd")
    lr: float = positive(0.05)
    momentum: float = in_range(0.0, 0, 1, hi_open=True)  # SGD's; AdamW has its betas
    weight_decay: float = at_least(0, 0.0)

    def validate(self, prefix: str = "strategy") -> None:
        if self.optimizer == "adamw" and self.momentum > 0:
            raise ConfigError(
                f"{prefix}.momentum",
                f"is the inner SGD momentum and AdamW does not use it (got {self.momentum}); "
                "set it to 0 or use optimizer=sgd (an outer momentum is outer_momentum)",
            )


def make_optimizer(model: torch.nn.Module, cfg: LocalTrainingConfig) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    return torch.optim.SGD(
        params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay
    )


def local_steps(
    client: Client[Any],
    optimizer: torch.optim.Optimizer,
    task: Task,
    steps: int,
    batch_size: int,
) -> float:
    """Run ``steps`` optimizer steps on batches drawn from the client's data with its own
    generator; the mean training loss. The steps are charged to the client's compute
    time (:meth:`Client.count_steps`)."""
    model, data, generator = client.model, client.data, client.generator
    client.count_steps(steps)
    model.train()
    total = 0.0
    for _ in range(steps):
        batch = data.sample(batch_size, generator)
        optimizer.zero_grad(set_to_none=True)
        loss = task.loss(model, batch)
        loss.backward()
        optimizer.step()
        total += float(loss.detach())
    return total / steps
