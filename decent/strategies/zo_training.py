"""Zeroth-order local steps (MeZO, Malladi et al., 2023), shared by MeZO, DZSGD and the
shared-randomness gossip strawman.

A ZO step draws a fresh seed s from the client's generator, estimates the projected
gradient α = (ℓ(θ+εz) − ℓ(θ−εz)) / 2ε on one batch with z regenerated from s (never
stored), and updates θ ← θ − η α z. Memory is that of inference: no activations kept for a
backward pass, no optimizer state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from decent.core.schema import at_least, positive
from decent.models import params
from decent.strategies.base import Client, PhaseContext
from decent.strategies.config import StrategyConfig
from decent.strategies.zo_estimate import zo_estimate
from decent.zo import mezo
from decent.zo.estimators import DenseReplica, InPlaceMeZO
from decent.zo.seeds import draw_seed

IN_PLACE = InPlaceMeZO()


@dataclass
class ZOStepConfig(StrategyConfig):
    """Hyper-parameters of zeroth-order local steps (:func:`zo_steps`), shared by MeZO,
    DZSGD and seed gossip."""

    local_steps: int = at_least(1, 1)  # zeroth-order steps per round
    batch_size: int = at_least(1, 16)  # MeZO's batch
    lr: float = positive(1e-6)  # MeZO's grid: {1e-5, 1e-6}, constant
    eps: float = positive(1e-3)  # MeZO's ε

    def examples_per_step(self) -> int:
        return self.batch_size


@torch.no_grad()
def zo_steps(client: Client[Any], ctx: PhaseContext,
             cfg: ZOStepConfig) -> tuple[float, list[tuple[int, float]]]:
    """``cfg.local_steps`` MeZO steps on the client's trainable tensors: the mean loss and
    the updates applied, as (seed, coefficient) pairs."""
    model = client.model
    model.eval()  # the two evaluations of one estimate must see the same network
    tensors = list(params.trainable_params(model).values())
    replica = DenseReplica(tensors)
    total = 0.0
    updates: list[tuple[int, float]] = []
    client.count_steps(cfg.local_steps)
    for _ in range(cfg.local_steps):
        batch = client.data.sample(cfg.batch_size, client.generator)
        seed = draw_seed(client.generator)
        # MeZO's in-place two-point step; batched execution takes a chunk's at once
        alpha, losses = zo_estimate(client, IN_PLACE, replica, ctx.task, batch, seed,
                                    cfg.eps, ctx.runner)
        updates.append((seed, cfg.lr * alpha))
        mezo.apply_updates(tensors, updates[-1:])
        total += sum(losses) / len(losses)
    return total / cfg.local_steps, updates
