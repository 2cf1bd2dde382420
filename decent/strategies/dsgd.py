"""DSGD — decentralized SGD (Lian et al., 2017).

Every round, each client i:
  1. takes H local optimizer steps on its own data;
  2. sends its parameters θ_i to every neighbour j ∈ N(i)        (4·d bytes per edge in fp32);
  3. mixes  θ_i ← Σ_{j ∈ N(i) ∪ {i}} w_ij θ_j  with the round graph's mixing weights
     (Metropolis–Hastings by default: w_ij = 1 / (1 + max(deg_i, deg_j))).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from decent.models import params
from decent.platform.errors import ConfigError
from decent.platform.messages import Message
from decent.strategies.base import Client, PhaseContext, Strategy
from decent.strategies.local_training import LocalTrainingConfig, local_steps, make_optimizer

WIRE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass
class DSGDConfig(LocalTrainingConfig):
    name: str = "dsgd"
    wire_dtype: str = "float32"  # "bfloat16" halves the bytes (2·d per edge)

    def validate(self, prefix: str = "strategy") -> None:
        super().validate(prefix)
        if self.wire_dtype not in WIRE_DTYPES:
            raise ConfigError(
                f"{prefix}.wire_dtype", f"choose one of: {', '.join(WIRE_DTYPES)}"
            )


class DSGD(Strategy):
    name = "dsgd"
    Config = DSGDConfig

    def phases(self, round_: int) -> tuple[str, ...]:
        return ("local", "gossip")

    def init_client(self, client: Client) -> None:
        client.state["optimizer"] = make_optimizer(client.model, self.cfg)

    def local(self, client: Client, inbox: list[Message], ctx: PhaseContext) -> list[Message]:
        cfg = self.cfg
        client.stats["loss"] = local_steps(
            client.model, client.state["optimizer"], ctx.task, client.data, client.generator,
            cfg.local_steps, cfg.batch_size,
        )
        theta = params.snapshot(client.model, WIRE_DTYPES[cfg.wire_dtype])
        return [Message(client.cid, j, "params", theta) for j in ctx.graph.neighbors[client.cid]]

    @torch.no_grad()
    def gossip(self, client: Client, inbox: list[Message], ctx: PhaseContext) -> None:
        w = ctx.graph.weights[client.cid]
        live = params.trainable_params(client.model)
        mixed = {name: w[client.cid] * p for name, p in live.items()}
        for msg in inbox:  # sorted by source: the sum's order is fixed
            for name, value in msg.payload.items():
                mixed[name] += w[msg.src] * value.to(mixed[name].dtype)
        params.load(client.model, mixed)
