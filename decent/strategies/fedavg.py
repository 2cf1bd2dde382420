"""FedAvg with an outer optimiser — the server-based baseline family.

The server is vertex 0 of a star graph, so its links are checked and counted like any
other. Round t:
  1. every worker starts from the global model θ, runs H local steps to θ_i and uploads
     the pseudo-gradient Δ_i = θ − θ_i                                  (4·d bytes up);
  2. the server averages Δ = mean_i Δ_i, sets it as the gradient of θ and takes one
     outer optimiser step, then broadcasts θ                          (4·d bytes down);
  3. workers load θ.
Outer SGD with lr 1 is FedAvg (McMahan et al., 2017); Nesterov SGD with lr 0.7 and
momentum 0.9 is DiLoCo's outer loop (Douillard et al., 2023).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from decent.models import params
from decent.platform.errors import ConfigError
from decent.platform.messages import Message
from decent.strategies.base import Client, PhaseContext, Strategy
from decent.strategies.local_training import LocalTrainingConfig, local_steps, make_optimizer
from decent.topologies import Topology

SERVER = 0


@dataclass
class FedAvgConfig(LocalTrainingConfig):
    name: str = "fedavg"
    outer_lr: float = 1.0
    outer_momentum: float = 0.0
    outer_nesterov: bool = False

    def validate(self, prefix: str = "strategy") -> None:
        super().validate(prefix)
        if self.outer_lr <= 0:
            raise ConfigError(f"{prefix}.outer_lr", f"must be > 0 (got {self.outer_lr})")
        if self.outer_nesterov and self.outer_momentum <= 0:
            raise ConfigError(f"{prefix}.outer_nesterov", "Nesterov needs outer_momentum > 0")


class FedAvg(Strategy):
    name = "fedavg"
    Config = FedAvgConfig

    def check_topology(self, topology: Topology) -> None:
        if topology.name != "star":
            raise ConfigError(
                "topology.name",
                f"{self.name} runs on a star (server at vertex 0); got '{topology.name}'",
            )

    def data_holders(self) -> list[int]:
        return [cid for cid in range(self.n) if cid != SERVER]

    def phases(self, round_: int) -> tuple[str, ...]:
        return ("local", "aggregate", "sync")

    def init_client(self, client: Client) -> None:
        cfg = self.cfg
        if client.cid == SERVER:
            client.state["outer"] = torch.optim.SGD(
                params.trainable_params(client.model).values(),
                lr=cfg.outer_lr, momentum=cfg.outer_momentum, nesterov=cfg.outer_nesterov,
            )
        else:
            client.state["optimizer"] = make_optimizer(client.model, cfg)

    def local(self, client: Client, inbox: list[Message], ctx: PhaseContext) -> list[Message]:
        if client.cid == SERVER:
            return []
        start = params.snapshot(client.model)
        client.stats["loss"] = local_steps(
            client.model, client.state["optimizer"], ctx.task, client.data, client.generator,
            self.cfg.local_steps, self.cfg.batch_size,
        )
        live = params.trainable_params(client.model)
        delta = {name: start[name] - live[name].detach() for name in start}
        return [Message(client.cid, SERVER, "delta", delta)]

    def aggregate(self, client: Client, inbox: list[Message], ctx: PhaseContext) -> list[Message]:
        if client.cid != SERVER:
            return []
        live = params.trainable_params(client.model)
        for name, p in live.items():
            p.grad = sum(msg.payload[name] for msg in inbox) / len(inbox)
        client.state["outer"].step()
        theta = params.snapshot(client.model)
        return [Message(SERVER, j, "global", theta) for j in ctx.graph.neighbors[SERVER]]

    def sync(self, client: Client, inbox: list[Message], ctx: PhaseContext) -> None:
        for msg in inbox:
            params.load(client.model, msg.payload)
