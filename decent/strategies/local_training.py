"""Local optimisation steps shared by the first-order strategies."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from decent.platform.errors import ConfigError
from decent.tasks.base import Task

OPTIMIZERS = ("sgd", "adamw")


@dataclass
class LocalTrainingConfig:
    """Hyper-parameters of a client's inner loop (fields shared by many strategies)."""

    local_steps: int = 5
    batch_size: int = 8
    optimizer: str = "sgd"
    lr: float = 0.05
    momentum: float = 0.0
    weight_decay: float = 0.0

    def validate(self, prefix: str = "strategy") -> None:
        if self.lr <= 0:
            raise ConfigError(f"{prefix}.lr", f"must be > 0 (got {self.lr})")
        if self.local_steps < 1:
            raise ConfigError(f"{prefix}.local_steps", f"must be ≥ 1 (got {self.local_steps})")
        if self.batch_size < 1:
            raise ConfigError(f"{prefix}.batch_size", f"must be ≥ 1 (got {self.batch_size})")
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(
                f"{prefix}.optimizer",
                f"unknown optimizer '{self.optimizer}'; choose one of: {', '.join(OPTIMIZERS)}",
            )
        if not 0 <= self.momentum < 1:
            raise ConfigError(f"{prefix}.momentum", f"must be in [0, 1) (got {self.momentum})")


def make_optimizer(model: torch.nn.Module, cfg: LocalTrainingConfig) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    return torch.optim.SGD(
        params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay
    )


def local_steps(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    task: Task,
    data,
    generator: torch.Generator,
    steps: int,
    batch_size: int,
) -> float:
    """Run ``steps`` optimizer steps on batches drawn from ``data``; mean training loss."""
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
