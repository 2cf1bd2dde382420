"""GASLoC — gossip averaging with local updates (Cagnasso, Belilovsky & Oyallon, 2026).

DiLoCo's outer optimiser on any graph. Outer step t, worker i:
  1. H_i inner steps from θ_t^i (H_i may differ per worker):  θ_{t,H_i}^i;
  2. pseudo-gradient (the drift)  g_t^i = θ_{t,H_i}^i − θ_t^i;
  3. proposal  y_t^i = θ_t^i + η g_t^i, sent to every neighbour       (4·d bytes per edge);
  4. θ_{t+1}^i = y_t^i − α Σ_{j ∈ N(i)} λ_ij (y_t^i − y_t^j) + γ (y_t^i − y_{t−1}^i).
Stacked over workers, step 4 is θ_{t+1} = y_t − α Λ y_t + γ (y_t − y_{t−1}) with Λ the
weighted Laplacian of the round's graph. γ = 0 is plain GASLoC; γ > 0 the accelerated
variant (momentum on the post-update iterates), whose rate depends on √χ rather than on
the spectral gap χ of I − αΛ. Graphs may be static or drawn afresh each outer step
(``topology.name: one_peer`` / ``two_peer``: each worker talks to 1 or 2 random peers).

Choices where the paper leaves one open, all configurable:
* λ_ij = the round graph's mixing weight w_ij (``edge_weights: mixing``), so α = 1 gives
  θ_{t+1} = W y_t; ``unit`` sets λ_ij = 1 (then α ≤ 1/max degree keeps I − αΛ stochastic).
* the inner optimiser is AdamW, as in the DiLoCo family (the paper's formula writes SGD);
* y_{−1} = y_0, so the first outer step has no momentum term;
* heterogeneous H_i: ``local_steps_per_worker`` lists them, or ``local_steps_min`` draws
  each worker's H_i once, uniformly in [local_steps_min, local_steps], from its own RNG
  (a fixed speed per worker, as with heterogeneous hardware).

Special cases (tested): on the complete graph with αλ = 1/n and γ = 0 the update is
θ + η · mean g — DiLoCo with an SGD outer optimiser of lr η (FedAvg for η = 1); with
H = 1, η = 1, α = 1, γ = 0 it is DSGD with one local step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from decent.models import params
from decent.platform.errors import ConfigError
from decent.platform.messages import Message
from decent.strategies.base import Client, PhaseContext, Strategy
from decent.strategies.dsgd import WIRE_DTYPES
from decent.strategies.local_training import LocalTrainingConfig, local_steps, make_optimizer

EDGE_WEIGHTS = ("mixing", "unit")


@dataclass
class GASLoCConfig(LocalTrainingConfig):
    name: str = "gasloc"
    optimizer: str = "adamw"
    lr: float = 4e-4
    outer_lr: float = 1.0  # η
    gossip_step: float = 1.0  # α
    momentum: float = 0.0  # γ on the post-update iterates (0: plain GASLoC)
    inner_momentum: float = 0.0  # SGD momentum of the inner optimiser
    edge_weights: str = "mixing"  # λ_ij
    local_steps_min: int = 0  # > 0: H_i ~ U{local_steps_min..local_steps} per worker
    local_steps_per_worker: list[int] | None = None
    wire_dtype: str = "float32"

    def validate(self, prefix: str = "strategy") -> None:
        super().validate(prefix)
        if self.outer_lr <= 0:
            raise ConfigError(f"{prefix}.outer_lr", f"must be > 0 (got {self.outer_lr})")
        if self.gossip_step <= 0:
            raise ConfigError(f"{prefix}.gossip_step", f"must be > 0 (got {self.gossip_step})")
        if not 0 <= self.inner_momentum < 1:
            raise ConfigError(
                f"{prefix}.inner_momentum", f"must be in [0, 1) (got {self.inner_momentum})"
            )
        if self.edge_weights not in EDGE_WEIGHTS:
            raise ConfigError(
                f"{prefix}.edge_weights", f"choose one of: {', '.join(EDGE_WEIGHTS)}"
            )
        if self.local_steps_min < 0 or self.local_steps_min > self.local_steps:
            raise ConfigError(
                f"{prefix}.local_steps_min",
                f"must be in [0, local_steps={self.local_steps}] (got {self.local_steps_min})",
            )
        if self.local_steps_per_worker is not None and any(
            h < 1 for h in self.local_steps_per_worker
        ):
            raise ConfigError(
                f"{prefix}.local_steps_per_worker",
                f"every H_i must be ≥ 1 (got {self.local_steps_per_worker})",
            )
        if self.wire_dtype not in WIRE_DTYPES:
            raise ConfigError(f"{prefix}.wire_dtype", f"choose one of: {', '.join(WIRE_DTYPES)}")


class GASLoC(Strategy):
    name = "gasloc"
    Config = GASLoCConfig

    def __init__(self, cfg: GASLoCConfig, n: int) -> None:
        super().__init__(cfg, n)
        per_worker = cfg.local_steps_per_worker
        if per_worker is not None and len(per_worker) != n:
            raise ConfigError(
                "strategy.local_steps_per_worker",
                f"needs one H_i per worker: {n} values (got {len(per_worker)})",
            )
        # The `momentum` field is γ; the inner optimiser reads its own momentum.
        self.inner_cfg = LocalTrainingConfig(
            local_steps=cfg.local_steps, batch_size=cfg.batch_size, optimizer=cfg.optimizer,
            lr=cfg.lr, momentum=cfg.inner_momentum, weight_decay=cfg.weight_decay,
        )

    def phases(self, round_: int) -> tuple[str, ...]:
        return ("local", "gossip")

    def init_client(self, client: Client) -> None:
        cfg = self.cfg
        client.state["optimizer"] = make_optimizer(client.model, self.inner_cfg)
        if cfg.local_steps_per_worker is not None:
            h = cfg.local_steps_per_worker[client.cid]
        elif cfg.local_steps_min > 0:
            span = cfg.local_steps - cfg.local_steps_min + 1
            h = cfg.local_steps_min + int(torch.randint(span, (1,), generator=client.generator))
        else:
            h = cfg.local_steps
        client.state["H"] = h

    def local(self, client: Client, inbox: list[Message], ctx: PhaseContext) -> list[Message]:
        cfg = self.cfg
        theta = params.snapshot(client.model)  # θ_t^i
        client.stats["loss"] = local_steps(
            client.model, client.state["optimizer"], ctx.task, client.data, client.generator,
            client.state["H"], cfg.batch_size,
        )
        with torch.no_grad():
            live = params.trainable_params(client.model)
            # y = θ + η g with g = θ_H − θ (the drift)
            y = {name: theta[name] + cfg.outer_lr * (live[name] - theta[name]) for name in live}
        client.state["y"] = y
        wire = {name: t.to(WIRE_DTYPES[cfg.wire_dtype]) for name, t in y.items()}
        return [Message(client.cid, j, "y", wire) for j in ctx.graph.neighbors[client.cid]]

    @torch.no_grad()
    def gossip(self, client: Client, inbox: list[Message], ctx: PhaseContext) -> None:
        cfg = self.cfg
        y = client.state.pop("y")
        w = ctx.graph.weights[client.cid]
        new = {name: t.clone() for name, t in y.items()}
        for msg in inbox:  # sorted by source: the sum's order is fixed
            lam = w[msg.src] if cfg.edge_weights == "mixing" else 1.0
            for name, y_j in msg.payload.items():
                new[name] -= cfg.gossip_step * lam * (y[name] - y_j.to(y[name].dtype))
        if cfg.momentum > 0:
            prev = client.state.get("y_prev", y)  # y_{−1} = y_0
            for name in new:
                new[name] += cfg.momentum * (y[name] - prev[name])
            client.state["y_prev"] = y
        params.load(client.model, new)
