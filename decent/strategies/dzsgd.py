"""DZSGD (Tang et al., 2020): DSGD with the local gradient replaced by the zeroth-order
estimate.

Every round, each client i:
  1. takes H MeZO steps on its own data;
  2. sends its parameters θ_i to every neighbour                  (4·d bytes per edge);
  3. mixes θ_i ← Σ_{j ∈ N(i) ∪ {i}} w_ij θ_j (Metropolis–Hastings weights by default),
     or combines what it received by the rule ``robust``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from decent.core.messages import Message
from decent.models import params
from decent.robust.aggregators import robust_field
from decent.strategies.base import Client, PhaseContext, Strategy
from decent.strategies.inbox import Inbox
from decent.strategies.phases import phase
from decent.strategies.toolkit import average_with_neighbours
from decent.strategies.wire import WIRE_DTYPES, wire_dtype_field
from decent.strategies.zo_training import ZOStepConfig, zo_steps


@dataclass
class DZSGDConfig(ZOStepConfig):
    name: str = "dzsgd"
    # the dtype parameters travel in (bfloat16 halves the bytes)
    wire_dtype: str = wire_dtype_field()
    robust: Any = robust_field()  # the gossip average (mean) or a robust neighbourhood rule


@dataclass
class DZSGDState:
    """Nothing beyond the model: ZO steps keep no optimiser state."""


class DZSGD(Strategy[DZSGDState]):
    name = "dzsgd"
    Config = DZSGDConfig
    State = DZSGDState
    # its MeZO steps' ±ε evaluations run chunk by chunk (decent.engine.stacked_zo)
    batchable = True
    zo_estimator = "mezo"

    def init_state(self, client: Client[DZSGDState], shared: Any) -> DZSGDState:
        return DZSGDState()

    @phase()
    def local(self, client: Client[DZSGDState], inbox: Inbox,
              ctx: PhaseContext) -> list[Message]:
        client.stats["loss"], _ = zo_steps(client, ctx, self.cfg)
        theta = params.snapshot(client.model, WIRE_DTYPES[self.cfg.wire_dtype])
        return self.to_neighbours(client, ctx, "params", theta)

    @phase()
    def gossip(self, client: Client[DZSGDState], inbox: Inbox,
               ctx: PhaseContext) -> None:
        average_with_neighbours(client, inbox, ctx, robust=self.cfg.robust)
