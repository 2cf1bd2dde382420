"""GASLoC — gossip averaging with local updates (Cagnasso, Belilovsky & Oyallon, 2026).

DiLoCo's outer optimiser on any graph. Outer step t, worker i:
  1. H_i inner steps from θ_t^i (H_i may differ per worker):  θ_{t,H_i}^i;
  2. pseudo-gradient (the drift)  g_t^i = θ_{t,H_i}^i − θ_t^i;
  3. proposal  y_t^i = θ_t^i + η g_t^i, sent to every neighbour       (4·d bytes per edge);
  4. θ_{t+1}^i = y_t^i − α Σ_{j ∈ N(i)} λ_ij (y_t^i − y_t^j) + γ (y_t^i − y_{t−1}^i),
     with α = ``gossip_step``, γ = ``outer_momentum``; ``momentum`` is the inner SGD's,
     as in every strategy.
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
* ``robust``: step 4's neighbour term y_i − α Σ λ_ij (y_i − y_j) = y_i + α (M − y_i), with
  M the weighted average, takes a robust rule's R in place of M (ClippedGossip: R − y_i =
  Σ_j λ_ij clip(y_j − y_i, τ_i)).

Special cases (tested): on the complete graph with αλ = 1/n and γ = 0 the update is
θ + η · mean g — DiLoCo with an SGD outer optimiser of lr η (FedAvg for η = 1); with
H = 1, η = 1, α = 1, γ = 0 it is DSGD with one local step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from decent.core.errors import ConfigError
from decent.core.graph import GraphFacts
from decent.core.messages import Message
from decent.core.schema import at_least, in_range, one_of, positive
from decent.models import params
from decent.robust.aggregators import robust_field
from decent.robust.neighbourhood import robust_average
from decent.strategies.base import Client, PhaseContext, Strategy
from decent.strategies.gossip import is_robust
from decent.strategies.inbox import Inbox
from decent.strategies.local_training import (
    OPTIMIZERS,
    LocalTrainingConfig,
    local_steps,
    make_optimizer,
)
from decent.strategies.phases import phase
from decent.strategies.wire import WIRE_DTYPES, wire_dtype_field

EDGE_WEIGHTS = ("mixing", "unit")


@dataclass
class GASLoCConfig(LocalTrainingConfig):
    RENAMED: ClassVar[dict[str, str]] = {"inner_momentum": "momentum"}

    name: str = "gasloc"
    optimizer: str = one_of(OPTIMIZERS, "adamw")  # the inner optimiser
    lr: float = positive(4e-4)  # the inner learning rate
    outer_lr: float = positive(1.0)  # η
    gossip_step: float = positive(1.0)  # α
    outer_momentum: float = in_range(0.0, 0, 1, hi_open=True)  # γ (0: plain GASLoC)
    edge_weights: str = one_of(EDGE_WEIGHTS, "mixing")  # λ_ij
    local_steps_min: int = at_least(0, 0)  # > 0: H_i ~ U{local_steps_min..local_steps}
    # H_i for each worker (one per client); overrides local_steps and local_steps_min
    local_steps_per_worker: list[int] | None = at_least(1, None, nullable=True, each=True)
    # the dtype proposals travel in (bfloat16 halves the bytes)
    wire_dtype: str = wire_dtype_field()
    # how a worker combines the proposals it received: the paper's Laplacian step (mean),
    # or a robust rule R over {y_i} ∪ {y_j}, then θ = y_i + α (R − y_i) (+ momentum)
    robust: Any = robust_field()

    def validate(self, prefix: str = "strategy") -> None:
        super().validate(prefix)
        if self.local_steps_min > self.local_steps:
            raise ConfigError(
                f"{prefix}.local_steps_min",
                f"must be in [0, local_steps={self.local_steps}] (got {self.local_steps_min})",
            )


@dataclass
class GASLoCState:
    optimizer: torch.optim.Optimizer
    H: int  # this worker's inner steps per outer step
    y: dict[str, torch.Tensor] | None = None  # y_t, between the two phases of a step
    y_prev: dict[str, torch.Tensor] | None = None  # y_{t−1}, kept when γ > 0


class GASLoC(Strategy[GASLoCState]):
    name = "gasloc"
    Config = GASLoCConfig
    State = GASLoCState
    batchable = True

    def __init__(self, cfg: GASLoCConfig, graph: GraphFacts) -> None:
        super().__init__(cfg, graph)
        per_worker = cfg.local_steps_per_worker
        if per_worker is not None and len(per_worker) != graph.n:
            raise ConfigError(
                "strategy.local_steps_per_worker",
                f"needs one H_i per worker: {graph.n} values (got {len(per_worker)})",
            )

    def init_state(self, client: Client[GASLoCState], shared: Any) -> GASLoCState:
        cfg = self.cfg
        if cfg.local_steps_per_worker is not None:
            h = cfg.local_steps_per_worker[client.cid]
        elif cfg.local_steps_min > 0:
            span = cfg.local_steps - cfg.local_steps_min + 1
            h = cfg.local_steps_min + int(torch.randint(span, (1,), generator=client.generator))
        else:
            h = cfg.local_steps
        return GASLoCState(make_optimizer(client.model, cfg), H=h)

    @phase()
    def local(self, client: Client[GASLoCState], inbox: Inbox,
              ctx: PhaseContext) -> list[Message]:
        cfg = self.cfg
        state = client.state
        theta = params.snapshot(client.model)  # θ_t^i
        client.stats["loss"] = local_steps(
            client, state.optimizer, ctx.task, state.H, cfg.batch_size, cfg, ctx.round,
            runner=ctx.runner)
        with torch.no_grad():
            live = params.trainable_params(client.model)
            # y = θ + η g with g = θ_H − θ (the drift)
            y = {name: theta[name] + cfg.outer_lr * (live[name] - theta[name]) for name in live}
        state.y = y
        wire = {name: t.to(WIRE_DTYPES[cfg.wire_dtype]) for name, t in y.items()}
        return self.to_neighbours(client, ctx, "y", wire)

    @phase()
    @torch.no_grad()
    def gossip(self, client: Client[GASLoCState], inbox: Inbox,
               ctx: PhaseContext) -> None:
        cfg = self.cfg
        state = client.state
        y, state.y = state.y, None
        assert y is not None
        w = ctx.graph.weights[client.cid]
        newest = inbox.newest()  # in source order
        lam = {src: w[src] if cfg.edge_weights == "mixing" else 1.0 for src in newest}
        if is_robust(cfg.robust):
            mixed = robust_average(cfg.robust, y, 1.0 - sum(lam.values()), lam,
                                   {src: msg.payload for src, msg in newest.items()})
            new = {name: y[name] + cfg.gossip_step * (mixed[name] - y[name]) for name in y}
        else:
            new = {name: t.clone() for name, t in y.items()}
            # a lost y_j leaves its term out (as if y_j = y_i); a late one is superseded
            for msg in newest.values():
                for name, y_j in msg.payload.items():
                    new[name] -= cfg.gossip_step * lam[msg.src] * (
                        y[name] - y_j.to(y[name].dtype))
        if cfg.outer_momentum > 0:
            prev = state.y_prev if state.y_prev is not None else y  # y_{−1} = y_0
            for name in new:
                new[name] += cfg.outer_momentum * (y[name] - prev[name])
            state.y_prev = y
        params.load(client.model, new)
