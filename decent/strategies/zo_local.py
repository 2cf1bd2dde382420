"""Zeroth-order local training: MeZO (Malladi et al., 2023) and DZSGD (Tang et al., 2020).

A ZO step draws a fresh seed s from the client's generator, estimates the projected
gradient α = (ℓ(θ+εz) − ℓ(θ−εz)) / 2ε on one batch with z regenerated from s (never
stored), and updates θ ← θ − η α z. Memory is that of inference: no activations kept for a
backward pass, no optimizer state.

* ``mezo`` — ZO steps and no communication: MeZO itself on a single client (topology
  ``complete`` with n = 1), or n independent MeZO runs.
* ``dzsgd`` — DSGD with the local gradient replaced by the ZO estimate: H ZO steps, then
  Metropolis gossip of the full parameters (4·d bytes per edge per round).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from decent.models import params
from decent.platform.errors import ConfigError
from decent.platform.messages import Message
from decent.strategies.base import Client, PhaseContext
from decent.strategies.dsgd import DSGD, WIRE_DTYPES
from decent.zo import mezo

SEED_SPACE = 2**62  # message seeds are drawn uniformly below this


def draw_seed(client: Client) -> int:
    return int(torch.randint(SEED_SPACE, (1,), generator=client.generator))


@dataclass
class ZOStepConfig:
    local_steps: int = 1
    batch_size: int = 16  # MeZO's batch
    lr: float = 1e-6  # MeZO's grid: {1e-5, 1e-6}, constant
    eps: float = 1e-3  # MeZO's ε

    def validate(self, prefix: str = "strategy") -> None:
        for key in ("lr", "eps"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"{prefix}.{key}", f"must be > 0 (got {getattr(self, key)})")
        for key in ("local_steps", "batch_size"):
            if getattr(self, key) < 1:
                raise ConfigError(f"{prefix}.{key}", f"must be ≥ 1 (got {getattr(self, key)})")


@torch.no_grad()
def zo_steps(client: Client, ctx: PhaseContext,
             cfg: ZOStepConfig) -> tuple[float, list[tuple[int, float]]]:
    """``cfg.local_steps`` MeZO steps on the client's trainable tensors: the mean loss and
    the updates applied, as (seed, coefficient) pairs."""
    model = client.model
    model.eval()  # the two evaluations of one estimate must see the same network
    tensors = list(params.trainable_params(model).values())
    total = 0.0
    updates: list[tuple[int, float]] = []
    for _ in range(cfg.local_steps):
        batch = client.data.sample(cfg.batch_size, client.generator)
        seed = draw_seed(client)
        losses: list[float] = []

        def loss_fn(batch=batch, losses=losses) -> float:
            losses.append(float(ctx.task.loss(model, batch)))
            return losses[-1]

        alpha = mezo.two_point(tensors, loss_fn, seed, cfg.eps)
        updates.append((seed, cfg.lr * alpha))
        mezo.apply_updates(tensors, updates[-1:])
        total += sum(losses) / len(losses)
    return total / cfg.local_steps, updates


@dataclass
class MeZOConfig(ZOStepConfig):
    name: str = "mezo"


class MeZO(DSGD):
    name = "mezo"
    Config = MeZOConfig

    def phases(self, round_: int) -> tuple[str, ...]:
        return ("local",)

    def init_client(self, client: Client) -> None:
        pass

    def local(self, client: Client, inbox: list[Message], ctx: PhaseContext) -> list[Message]:
        client.stats["loss"], _ = zo_steps(client, ctx, self.cfg)
        return []


@dataclass
class DZSGDConfig(ZOStepConfig):
    name: str = "dzsgd"
    wire_dtype: str = "float32"

    def validate(self, prefix: str = "strategy") -> None:
        super().validate(prefix)
        if self.wire_dtype not in WIRE_DTYPES:
            raise ConfigError(f"{prefix}.wire_dtype", f"choose one of: {', '.join(WIRE_DTYPES)}")


class DZSGD(DSGD):
    """DSGD's gossip phase with ZO local steps."""

    name = "dzsgd"
    Config = DZSGDConfig

    def init_client(self, client: Client) -> None:
        pass

    def local(self, client: Client, inbox: list[Message], ctx: PhaseContext) -> list[Message]:
        client.stats["loss"], _ = zo_steps(client, ctx, self.cfg)
        theta = params.snapshot(client.model, WIRE_DTYPES[self.cfg.wire_dtype])
        return [Message(client.cid, j, "params", theta) for j in ctx.graph.neighbors[client.cid]]
