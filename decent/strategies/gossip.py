"""The gossip average θ_i ← Σ_{j ∈ N(i) ∪ {i}} w_ij θ_j, shared by DSGD and DZSGD."""

from __future__ import annotations

from typing import Any

import torch

from decent.core.messages import Message
from decent.models import params
from decent.strategies.base import Client, PhaseContext


def newest_per_neighbour(client: Client[Any], inbox: list[Message], ctx: PhaseContext,
                         tag: str | None = None) -> dict[int, Message]:
    """The newest message (of ``tag``, if given) from each of this round's neighbours, in
    source order.

    Without faults every neighbour sends exactly one; under injected faults one may be
    missing (lost) or come twice (a late one beside the fresh one), and a late message may
    come from a client that is no neighbour this round (a time-varying graph): it is
    ignored."""
    neighbours = set(ctx.graph.neighbors[client.cid])
    newest: dict[int, Message] = {}
    for msg in inbox:  # sorted by (source, phase sent): the last per source is the newest
        if msg.src in neighbours and not msg.undeliverable and (tag is None or msg.tag == tag):
            newest[msg.src] = msg
    return newest


@torch.no_grad()
def average_with_neighbours(client: Client[Any], inbox: list[Message],
                            ctx: PhaseContext) -> None:
    """Mix the client's trainable tensors with its neighbours' (each message's payload is
    a name → tensor dict, at any wire dtype) using the round graph's mixing weights.

    The newest message per neighbour is used, and the weight of a neighbour whose message
    was lost stays with the client's own tensors, so the weights still sum to one.
    Without faults this is the plain gossip average."""
    w = ctx.graph.weights[client.cid]
    newest = newest_per_neighbour(client, inbox, ctx)
    own = w[client.cid] + sum(w[j] for j in ctx.graph.neighbors[client.cid]
                              if j not in newest)
    live = params.trainable_params(client.model)
    mixed = {name: own * p for name, p in live.items()}
    for src, msg in newest.items():  # in source order: the sum's order is fixed
        for name, value in msg.payload.items():
            mixed[name] += w[src] * value.to(mixed[name].dtype)
    params.load(client.model, mixed)
