"""Local optimisation steps shared by the first-order strategies."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch

from decent.core.errors import ConfigError
from decent.core.schema import at_least, in_range, one_of, positive
from decent.models.output_logits import OutputLogits
from decent.models.router_losses import RouterLogits, RouterLossConfig
from decent.privacy.dp_sgd import PrivacyConfig
from decent.strategies.base import Client, StepRunner
from decent.strategies.config import LRScheduleConfig, StrategyConfig
from decent.strategies.step_batching import StepRequest
from decent.tasks.base import Task

OPTIMIZERS = ("sgd", "adamw")


def adamw_betas(default: tuple[float, float] = (0.9, 0.999)) -> Any:
    """AdamW's (β1, β2) as a config field: each in [0, 1) (torch's default unless told)."""
    return in_range(list(default), 0, 1, hi_open=True, each=True)


def check_betas(betas: list[float], prefix: str) -> None:
    """Refuse a ``betas`` field that is not AdamW's pair (β1, β2), naming
    ``{prefix}.betas``: for a config's ``validate``, as the ranges check each value only."""
    if len(betas) != 2:
        raise ConfigError(f"{prefix}.betas", f"AdamW's (β1, β2): give two values, e.g. "
                          f"[0.9, 0.95] (got {list(betas)})")


@dataclass
class LocalTrainingConfig(StrategyConfig):
    """Hyper-parameters of a client's inner loop (fields shared by many strategies).

    In every strategy ``lr``, ``momentum`` and ``weight_decay`` are the inner optimiser's;
    outer steps have their own ``outer_*`` fields."""

    local_steps: int = at_least(1, 5)  # H: local optimiser steps per round
    batch_size: int = at_least(1, 8)  # examples per local step
    optimizer: str = one_of(OPTIMIZERS, "sgd")  # the local (inner) optimiser
    lr: float = positive(0.05)  # the local optimiser's learning rate (the schedule's peak)
    momentum: float = in_range(0.0, 0, 1, hi_open=True)  # SGD's; AdamW has its betas
    betas: list[float] = adamw_betas()  # AdamW's (β1, β2)
    weight_decay: float = at_least(0, 0.0)  # decoupled for AdamW, L2 for SGD (torch's)
    # clip the gradient's global norm (over every trainable tensor) to this before each
    # inner step (torch.nn.utils.clip_grad_norm_); 0: no clipping
    grad_clip: float = at_least(0, 0.0)
    # the inner learning-rate schedule
    lr_schedule: LRScheduleConfig = field(default_factory=LRScheduleConfig)
    # MoE models: the router's load-balancing and z-loss terms (ignored by dense models)
    router_loss: RouterLossConfig = field(default_factory=RouterLossConfig)
    # language models: coefficient of the output-logit z-loss, mean log²Z over the positions
    # that predict a token (PaLM's 1e-4; SPES's released configs 1e-5); ignored by models
    # without an output embedding
    logit_z_loss: float = at_least(0, 0.0)
    # client-level differential privacy: {mechanism: dp_sgd, clip, sigma, delta} makes every
    # local step DP-SGD's (Poisson sample, per-example clipping, Gaussian noise) and
    # reports each client's ε (dp_epsilon); mechanism none: ordinary steps
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)

    def examples_per_step(self) -> int:
        return self.batch_size

    def inner_schedule(self) -> tuple[LRScheduleConfig, int]:
        return self.lr_schedule, self.local_steps

    def validate(self, prefix: str = "strategy") -> None:
        check_betas(self.betas, prefix)
        if self.privacy.enabled:
            extra = [f for f, on in (("grad_clip", self.grad_clip > 0),
                                     ("logit_z_loss", self.logit_z_loss > 0),
                                     ("router_loss", self.router_loss.active)) if on]
            if extra:
                raise ConfigError(f"{prefix}.{extra[0]}", "with privacy.mechanism dp_sgd the "
                                  "step is the clipped, noised per-example gradient of the "
                                  "task's loss alone (privacy.clip bounds it): set it off")
        if self.optimizer == "adamw" and self.momentum > 0:
            raise ConfigError(
                f"{prefix}.momentum",
                f"is the inner SGD momentum and AdamW does not use it (got {self.momentum}); "
                "set it to 0 or use optimizer=sgd (an outer momentum is outer_momentum)",
            )


def make_optimizer(model: torch.nn.Module, cfg: LocalTrainingConfig) -> torch.optim.Optimizer:
    """The local (inner) optimiser ``cfg`` describes, over the model's trainable tensors:
    AdamW (``lr``, ``betas``, decoupled ``weight_decay``) or SGD (``lr``, ``momentum``,
    ``weight_decay`` as L2). Keep it in the client's ``State``: a checkpoint saves it."""
    params = [p for p in model.parameters() if p.requires_grad]
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=cfg.lr, betas=(cfg.betas[0], cfg.betas[1]),
                                 weight_decay=cfg.weight_decay)
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
    runner: StepRunner | None = None,
) -> float:
    """Run ``steps`` optimizer steps on batches drawn from the client's data with its own
    generator; the mean training loss. The steps are charged to the client's compute
    time (:meth:`Client.count_steps`). With ``cfg`` given: step i of round ``round_`` runs
    at lr · factor(round_ · steps + i) when its ``lr_schedule`` is active; with its
    ``router_loss`` on and an MoE model, each step minimises the task loss plus the router
    terms, whose means are recorded as the client's ``balance_loss`` and ``z_loss``; with
    ``logit_z_loss`` on and a language model, plus that coefficient times the output-logit
    z-loss (recorded as ``logit_z_loss``); with ``grad_clip`` on, the gradient's global norm
    is clipped before each step (the mean norm before clipping is recorded as
    ``grad_norm``). The returned mean is the task loss alone. ``runner``: the phase
    context's (``ctx.runner``), which takes a batched process's clients' steps together."""
    client.count_steps(steps)
    request = StepRequest(client, optimizer, task, steps, batch_size, cfg, round_)
    if cfg is not None and cfg.privacy.enabled:  # per-example steps: each client its own
        from decent.strategies.private_steps import private_client_steps

        return private_client_steps(request)
    if runner is not None:  # the process takes its clients' steps together
        return float(runner(request))
    return one_client_steps(request)


def one_client_steps(request: StepRequest) -> float:
    """The steps of :func:`local_steps` for one client alone (sequential execution)."""
    client, optimizer, task = request.client, request.optimizer, request.task
    steps, batch_size, cfg, round_ = (request.steps, request.batch_size, request.cfg,
                                      request.round_)
    model, data, generator = client.model, client.data, client.generator
    model.train()
    schedule = cfg.lr_schedule if cfg is not None and cfg.lr_schedule.active else None
    router = cfg.router_loss if cfg is not None and cfg.router_loss.active else None
    # the routers and the LM head are found once; a dense model has no router, a
    # classifier no LM head, and those terms then cost nothing
    capture = RouterLogits(model) if router is not None else None
    if capture is not None and not capture.found:
        capture = None
    z_out = cfg.logit_z_loss if cfg is not None else 0.0
    head = OutputLogits(model) if z_out > 0 else None
    if head is not None and not head.found:
        head = None
    clip = cfg.grad_clip if cfg is not None else 0.0
    trainable = [p for p in model.parameters() if p.requires_grad] if clip > 0 else []
    total, balance, z, logit_z, norm = 0.0, 0.0, 0.0, 0.0, 0.0
    for i in range(steps):
        if schedule is not None:
            for group in optimizer.param_groups:
                group["lr"] = cfg.lr * schedule.factor(round_ * steps + i)  # type: ignore[union-attr]
        batch = data.sample(batch_size, generator)
        optimizer.zero_grad(set_to_none=True)
        with capture or nullcontext(), head or nullcontext():
            loss = objective = task.loss(model, batch)
        if capture is not None:
            b, zl = capture.balance_loss(), capture.z_loss()
            objective = objective + router.balance * b + router.z * zl  # type: ignore[union-attr]
            balance, z = balance + float(b.detach()), z + float(zl.detach())
        if head is not None:
            zo = head.z_loss()
            objective = objective + z_out * zo
            logit_z += float(zo.detach())
        objective.backward()
        if clip > 0:
            norm += float(torch.nn.utils.clip_grad_norm_(trainable, clip))
        optimizer.step()
        total += float(loss.detach())
    if capture is not None:
        if router.balance > 0:  # type: ignore[union-attr]
            client.stats["balance_loss"] = balance / steps
        if router.z > 0:  # type: ignore[union-attr]
            client.stats["z_loss"] = z / steps
    if head is not None:
        client.stats["logit_z_loss"] = logit_z / steps
    if clip > 0:
        client.stats["grad_norm"] = norm / steps
    return total / steps
