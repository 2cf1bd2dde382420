"""FedAvg with an outer optimiser — the server-based baseline family.

The server is vertex 0 of a star graph, so its links are checked and counted like any
other. Round t:
  1. every worker starts from the global model θ, runs H local steps to θ_i and uploads
     the pseudo-gradient Δ_i = θ − θ_i                                  (4·d bytes up;
     optionally compressed, Top-K or INT8, with error feedback on the worker);
  2. the server averages Δ = mean_i Δ_i, sets it as the gradient of θ and takes one
     outer optimiser step, then broadcasts θ                          (4·d bytes down);
  3. workers load θ.
Outer SGD with lr 1 is FedAvg (McMahan et al., 2017); Nesterov SGD with lr 0.7 and
momentum 0.9 is DiLoCo's outer loop (Douillard et al., 2023).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from decent.compression import CompressionConfig, ErrorFeedback, build_compressor
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
    # Upload compression (the broadcast stays dense): identity by default.
    compression: CompressionConfig = field(default_factory=CompressionConfig)

    def validate(self, prefix: str = "strategy") -> None:
        super().validate(prefix)
        self.compression.validate(f"{prefix}.compression")
        if self.outer_lr <= 0:
            raise ConfigError(f"{prefix}.outer_lr", f"must be > 0 (got {self.outer_lr})")
        if self.outer_nesterov and self.outer_momentum <= 0:
            raise ConfigError(f"{prefix}.outer_nesterov", "Nesterov needs outer_momentum > 0")


class FedAvg(Strategy):
    name = "fedavg"
    Config = FedAvgConfig

    def __init__(self, cfg: FedAvgConfig, n: int) -> None:
        super().__init__(cfg, n)
        self.compressor = build_compressor(cfg.compression)
        # Uncompressed uploads stay plain tensors (the FedAvg of the paper, bit for bit).
        self.encoded = cfg.compression.name != "identity" or cfg.compression.error_feedback

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
            if cfg.compression.error_feedback:
                client.state["feedback"] = ErrorFeedback(self.compressor)

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
        if "feedback" in client.state:
            wire = client.state["feedback"].compress(delta)
        elif self.encoded:
            wire = {name: self.compressor.compress(t) for name, t in delta.items()}
        else:
            wire = delta
        return [Message(client.cid, SERVER, "delta", wire)]

    def aggregate(self, client: Client, inbox: list[Message], ctx: PhaseContext) -> list[Message]:
        if client.cid != SERVER:
            return []
        live = params.trainable_params(client.model)
        for name, p in live.items():
            deltas = [
                self.compressor.decompress(msg.payload[name], p) if self.encoded
                else msg.payload[name]
                for msg in inbox
            ]
            p.grad = sum(deltas) / len(deltas)
        client.state["outer"].step()
        theta = params.snapshot(client.model)
        return [Message(SERVER, j, "global", theta) for j in ctx.graph.neighbors[SERVER]]

    def sync(self, client: Client, inbox: list[Message], ctx: PhaseContext) -> None:
        for msg in inbox:
            params.load(client.model, msg.payload)
