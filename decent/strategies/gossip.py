"""The gossip average θ_i ← Σ_{j ∈ N(i) ∪ {i}} w_ij θ_j, shared by DSGD and DZSGD."""

from __future__ import annotations

from typing import Any

import torch

from decent.core.messages import Message
from decent.models import params
from decent.strategies.base import Client, PhaseContext


@torch.no_grad()
def average_with_neighbours(client: Client[Any], inbox: list[Message],
                            ctx: PhaseContext) -> None:
    """Mix the client's trainable tensors with its neighbours' (each message's payload is
    a name → tensor dict, at any wire dtype) using the round graph's mixing weights."""
    w = ctx.graph.weights[client.cid]
    live = params.trainable_params(client.model)
    mixed = {name: w[client.cid] * p for name, p in live.items()}
    for msg in inbox:  # sorted by source: the sum's order is fixed
        for name, value in msg.payload.items():
            mixed[name] += w[msg.src] * value.to(mixed[name].dtype)
    params.load(client.model, mixed)
