"""CHOCO-SGD — decentralized SGD with compressed gossip (Koloskova et al., 2019).

Every client i keeps, besides θ_i, the public copy θ̂_i that its neighbours also hold,
and s_i = Σ_{j ∈ N(i) ∪ {i}} w_ij θ̂_j — the memory-efficient form of the paper's
Algorithm 1 (its appendix): two extra copies of the model whatever the degree, instead
of one per neighbour. Every round:
  1. H local optimizer steps:                 θ_i ← θ_i − β ∇f_i(θ_i)   (H times);
  2. compress the difference to the public copy, q_i = C(θ_i − θ̂_i), and send q_i to
     every neighbour            (Top-K: k·(4 + 4) bytes per edge — int32 index, fp32 value);
  3. θ̂_i += q_i,  s_i += w_ii q_i (on sending), then s_i += Σ_{j ∈ N(i)} w_ij q_j;
  4. consensus step (γ = ``gossip_step``):
     θ_i ← θ_i + γ (s_i − θ̂_i)  =  θ_i + γ Σ_j w_ij (θ̂_j − θ̂_i).
Public copies start at the initial (pretrained) weights, which every client shares: the
paper finds this matters, since early messages then carry only what training changed.
With the identity compressor and γ = 1 this is DSGD's exact gossip. With a robust rule
(``robust``) a client keeps each neighbour's public copy θ̂_j (the paper's Algorithm 1
form) and step 4 is θ_i ← θ_i + γ (R − θ̂_i), R the rule over θ̂_i and the θ̂_j.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from decent.compression import COMPRESSORS, TopKConfig, build_compressor
from decent.compression.topk import PER_TENSOR
from decent.core.errors import ConfigError
from decent.core.graph import GraphFacts
from decent.core.messages import Message
from decent.core.registry import component
from decent.core.schema import in_range
from decent.models import params
from decent.robust.aggregators import robust_field
from decent.robust.neighbourhood import robust_average
from decent.strategies.base import Client, PhaseContext, Strategy
from decent.strategies.gossip import is_robust
from decent.strategies.inbox import Inbox
from decent.strategies.local_training import LocalTrainingConfig, local_steps, make_optimizer
from decent.strategies.phases import phase


@dataclass
class ChocoConfig(LocalTrainingConfig):
    RENAMED: ClassVar[dict[str, str]] = {"consensus_step": "gossip_step"}

    name: str = "choco"
    gossip_step: float = in_range(1.0, 0, 1, lo_open=True)  # γ; the SeedFlood paper's 1
    # how the differences q_i = C(θ_i − θ̂_i) are compressed (Top-K 1% by default)
    compression: Any = field(default_factory=lambda: TopKConfig(keep=0.01),
                             metadata=component(COMPRESSORS))
    # how a client combines its neighbours' public copies: the paper's weighted sum s_i
    # (mean), or a robust rule over θ̂_i and each θ̂_j (it then keeps one copy a neighbour)
    robust: Any = robust_field()

    def validate(self, prefix: str = "strategy") -> None:
        super().validate(prefix)
        if getattr(self.compression, "scope", PER_TENSOR) != PER_TENSOR:
            raise ConfigError(f"{prefix}.compression.scope", "CHOCO-SGD compresses each "
                              "tensor's difference to its public copy on its own: use "
                              "per_tensor")
        if self.compression.error_feedback:
            raise ConfigError(
                f"{prefix}.compression.error_feedback",
                "CHOCO's public copies already carry what compression left out; set it to "
                "false (error feedback applies to fedavg/diloco uploads)",
            )


@dataclass
class ChocoState:
    optimizer: torch.optim.Optimizer
    public: dict[str, torch.Tensor]  # θ̂_i, the copy every neighbour also holds
    mixed: dict[str, torch.Tensor]  # s_i = Σ_{j ∈ N(i) ∪ {i}} w_ij θ̂_j
    # with a robust rule: each neighbour's public copy θ̂_j, and the shared start θ_0 a
    # neighbour's copy begins from (None: the paper's memory-efficient form)
    copies: dict[int, dict[str, torch.Tensor]] | None = None
    start: dict[str, torch.Tensor] | None = None


class ChocoSGD(Strategy[ChocoState]):
    name = "choco"
    Config = ChocoConfig
    State = ChocoState
    batchable = True

    def __init__(self, cfg: ChocoConfig, graph: GraphFacts) -> None:
        super().__init__(cfg, graph)
        if graph.time_varying:
            raise ConfigError(
                "topology.name",
                f"choco keeps running sums of its neighbours' public copies, so it needs a "
                f"static graph; '{graph.name}' changes every round",
            )
        self.compressor = build_compressor(cfg.compression)

    def init_state(self, client: Client[ChocoState], shared: Any) -> ChocoState:
        # θ̂_i = θ_0 and s_i = Σ_j w_ij θ_0 = θ_0
        robust = is_robust(self.cfg.robust)
        return ChocoState(make_optimizer(client.model, self.cfg),
                          public=params.snapshot(client.model),
                          mixed=params.snapshot(client.model),
                          copies={} if robust else None,
                          start=params.snapshot(client.model) if robust else None)

    def churn_problem(self, client: int, kind: str) -> str | None:
        return ("every client keeps its neighbours' public copies in step with the "
                "increments they send: one that leaves stops them for good")

    @phase()
    def local(self, client: Client[ChocoState], inbox: Inbox,
              ctx: PhaseContext) -> list[Message]:
        cfg = self.cfg
        state = client.state
        client.stats["loss"] = local_steps(
            client, state.optimizer, ctx.task, cfg.local_steps, cfg.batch_size,
            cfg, ctx.round,
            runner=ctx.runner)
        w_self = ctx.graph.weights[client.cid][client.cid]
        live = params.trainable_params(client.model)
        q = {}
        with torch.no_grad():
            for name, ref in state.public.items():
                q[name] = self.compressor.compress(live[name] - ref)
                dq = self.compressor.decompress(q[name], ref)
                ref += dq  # θ̂_i += q_i: the neighbours apply the same q_i to their copy
                state.mixed[name] += w_self * dq
        return self.to_neighbours(client, ctx, "q", q)

    @phase()
    @torch.no_grad()
    def gossip(self, client: Client[ChocoState], inbox: Inbox,
               ctx: PhaseContext) -> None:
        w = ctx.graph.weights[client.cid]
        public, mixed = client.state.public, client.state.mixed
        if client.state.copies is not None:
            self._robust_gossip(client, inbox, ctx)
            return
        for msg in inbox:  # sorted by source: the sum's order is fixed
            for name, payload in msg.payload.items():
                mixed[name] += w[msg.src] * self.compressor.decompress(payload, mixed[name])
        gamma = self.cfg.gossip_step
        for name, p in params.trainable_params(client.model).items():
            p += gamma * (mixed[name] - public[name])

    def _robust_gossip(self, client: Client[ChocoState], inbox: Inbox,
                       ctx: PhaseContext) -> None:
        """θ̂_j += q_j for each neighbour heard, then θ_i ← θ_i + γ (R − θ̂_i), with R the
        rule over θ̂_i and every neighbour's θ̂_j (the weights w_ij; s_i is R here)."""
        state = client.state
        assert state.copies is not None and state.start is not None
        for msg in inbox:  # sorted by source
            copy = state.copies.setdefault(
                msg.src, {name: t.clone() for name, t in state.start.items()})
            for name, payload in msg.payload.items():
                copy[name] += self.compressor.decompress(payload, copy[name])
        w = ctx.graph.weights[client.cid]
        heard = {j: state.copies[j] for j in sorted(state.copies)}
        mixed = robust_average(self.cfg.robust, state.public,
                               1.0 - sum(w.get(j, 0.0) for j in heard),
                               {j: w.get(j, 0.0) for j in heard}, heard)
        gamma = self.cfg.gossip_step
        for name, p in params.trainable_params(client.model).items():
            p += gamma * (mixed[name] - state.public[name])
