"""Local optimisation steps shared by the first-order strategies."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from decent.core.errors import ConfigError
from decent.core.schema import at_least, in_range, one_of, positive
from decent.models.router_losses import RouterLogits, RouterLossConfig
from decent.strategies.base import Client
from decent.tasks.base import Task

OPTIMIZERS = ("sgd", "adamw")
SCHEDULES = ("constant", "cosine")


@dataclass
class LRScheduleConfig:
    """The inner learning rate over a worker's inner steps t = round · H + i (i-th step of
    the round): a linear warm-up over the first ``warmup_steps`` steps, then constant or a
    cosine decay to ``min_lr_ratio`` · lr at ``total_steps`` (0: the run's rounds ×
    local_steps, filled in when the config is loaded). DiLoCo's recipe (Douillard et al.,
    2023, §3) is a warm-up then cosine decay. The factor is a function of t alone, so a
    resumed run continues the schedule with nothing extra in a checkpoint."""

    name: str = one_of(SCHEDULES, "constant")
    warmup_steps: int = at_least(0, 0)
    total_steps: int = at_least(0, 0)
    min_lr_ratio: float = in_range(0.0, 0, 1)

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
    lr_schedule: LRScheduleConfig = field(default_factory=LRScheduleConfig)
    # MoE models: the router's load-balancing and z-loss terms (ignored by dense models)
    router_loss: RouterLossConfig = field(default_factory=RouterLossConfig)

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
    cfg: LocalTrainingConfig | None = None,
    round_: int = 0,
) -> float:
    """Run ``steps`` optimizer steps on batches drawn from the client's data with its own
    generator; the mean training loss. The steps are charged to the client's compute
    time (:meth:`Client.count_steps`). With ``cfg`` given and its ``lr_schedule`` active,
    step i of round ``round_`` runs at lr · factor(round_ · steps + i); with its
    ``router_loss`` on and an MoE model, each step minimises the task loss plus the router
    terms, whose means are recorded as the client's ``balance_loss`` and ``z_loss`` (the
    returned mean is the task loss alone)."""
    model, data, generator = client.model, client.data, client.generator
    client.count_steps(steps)
    model.train()
    schedule = cfg.lr_schedule if cfg is not None and cfg.lr_schedule.active else None
    router = cfg.router_loss if cfg is not None and cfg.router_loss.active else None
    # the routers are found once; a dense model has none and trains on the task loss
    capture = RouterLogits(model) if router is not None else None
    if capture is not None and not capture.found:
        capture = None
    total, balance, z = 0.0, 0.0, 0.0
    for i in range(steps):
        if schedule is not None:
            for group in optimizer.param_groups:
                group["lr"] = cfg.lr * schedule.factor(round_ * steps + i)  # type: ignore[union-attr]
        batch = data.sample(batch_size, generator)
        optimizer.zero_grad(set_to_none=True)
        if capture is None:
            loss = objective = task.loss(model, batch)
        else:
            with capture:
                loss = task.loss(model, batch)
            b, zl = capture.balance_loss(), capture.z_loss()
            objective = loss + router.balance * b + router.z * zl  # type: ignore[union-attr]
            balance, z = balance + float(b.detach()), z + float(zl.detach())
        objective.backward()
        optimizer.step()
        total += float(loss.detach())
    if capture is not None:
        if router.balance > 0:  # type: ignore[union-attr]
            client.stats["balance_loss"] = balance / steps
        if router.z > 0:  # type: ignore[union-attr]
            client.stats["z_loss"] = z / steps
    return total / steps
