"""MeZO (Malladi et al., 2023): zeroth-order steps and no communication.

Each round every client takes H MeZO steps on its own data (see
:mod:`decent.strategies.zo_training`). On ``topology: {name: complete, n: 1}`` this is
single-client MeZO itself; with n clients, n independent MeZO runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from decent.core.messages import Message
from decent.strategies.base import Client, PhaseContext, Strategy
from decent.strategies.inbox import Inbox
from decent.strategies.phases import phase
from decent.strategies.zo_training import ZOStepConfig, zo_steps


@dataclass
class MeZOConfig(ZOStepConfig):
    name: str = "mezo"


@dataclass
class MeZOState:
    """MeZO keeps nothing between steps but the model itself."""


class MeZO(Strategy[MeZOState]):
    name = "mezo"
    Config = MeZOConfig
    State = MeZOState
    # its MeZO steps' ±ε evaluations run chunk by chunk (decent.engine.stacked_zo)
    batchable = True
    zo_estimator = "mezo"

    def init_state(self, client: Client[MeZOState], shared: Any) -> MeZOState:
        return MeZOState()

    @phase()
    def local(self, client: Client[MeZOState], inbox: Inbox,
              ctx: PhaseContext) -> list[Message]:
        client.stats["loss"], _ = zo_steps(client, ctx, self.cfg)
        return []
