"""DSGD — decentralized SGD (Lian et al., 2017).

Every round, each client i:
  1. takes H local optimizer steps on its own data;
  2. sends its parameters θ_i to every neighbour j ∈ N(i)        (4·d bytes per edge in fp32);
  3. mixes  θ_i ← Σ_{j ∈ N(i) ∪ {i}} w_ij θ_j  with the round graph's mixing weights
     (Metropolis–Hastings by default: w_ij = 1 / (1 + max(deg_i, deg_j))), or, with
     ``robust``, combines what it received by that rule (decent.robust.neighbourhood).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from decent.core.messages import Message
from decent.models import params
from decent.robust.aggregators import robust_field
from decent.strategies.base import Client, PhaseContext, Strategy
from decent.strategies.inbox import Inbox
from decent.strategies.local_training import LocalTrainingConfig, local_steps, make_optimizer
from decent.strategies.phases import phase
from decent.strategies.toolkit import average_with_neighbours
from decent.strategies.wire import WIRE_DTYPES, wire_dtype_field


@dataclass
class DSGDConfig(LocalTrainingConfig):
    name: str = "dsgd"
    wire_dtype: str = wire_dtype_field()  # "bfloat16" halves the bytes (2·d per edge)
    # how a client combines the models it received: the gossip average (mean), or a
    # Byzantine-robust rule over its neighbourhood (clipped_gossip, trimmed_mean, ...)
    robust: Any = robust_field()


@dataclass
class DSGDState:
    optimizer: torch.optim.Optimizer


class DSGD(Strategy[DSGDState]):
    name = "dsgd"
    Config = DSGDConfig
    State = DSGDState
    batchable = True

    def init_state(self, client: Client[DSGDState], shared: Any) -> DSGDState:
        return DSGDState(make_optimizer(client.model, self.cfg))

    @phase()
    def local(self, client: Client[DSGDState], inbox: Inbox,
              ctx: PhaseContext) -> list[Message]:
        cfg = self.cfg
        client.stats["loss"] = local_steps(
            client, client.state.optimizer, ctx.task, cfg.local_steps, cfg.batch_size,
            cfg, ctx.round,
            runner=ctx.runner)
        theta = params.snapshot(client.model, WIRE_DTYPES[cfg.wire_dtype])
        return self.to_neighbours(client, ctx, "params", theta)

    @phase()
    def gossip(self, client: Client[DSGDState], inbox: Inbox,
               ctx: PhaseContext) -> None:
        average_with_neighbours(client, inbox, ctx, robust=self.cfg.robust)
