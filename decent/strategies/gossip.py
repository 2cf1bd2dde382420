"""Gossip mixing: Σ_{j ∈ N(i) ∪ {i}} w_ij t_j with the round graph's mixing weights, for
the model (DSGD, DZSGD) or any tensors of a client's state. Part of the toolkit
(:mod:`decent.strategies.toolkit`)."""

from __future__ import annotations

from typing import Any

import torch

from decent.core.messages import Message
from decent.models import params
from decent.robust.aggregators import AggregatorConfig
from decent.robust.neighbourhood import robust_average
from decent.strategies.base import Client, PhaseContext
from decent.strategies.inbox import Inbox
from decent.strategies.step_batching import MixRequest

Tensors = dict[str, torch.Tensor]


@torch.no_grad()
def mix_with_neighbours(client: Client[Any], own: Tensors, inbox: Inbox | list[Message],
                        ctx: PhaseContext, part: str | None = None,
                        tag: str | None = None, robust: AggregatorConfig | None = None
                        ) -> Tensors:
    """Σ_{j ∈ N(i) ∪ {i}} w_ij t_j for the tensors ``own`` of client i (any of its state:
    the model, a tracker, a public copy), with the neighbours' t_j in the newest message
    (of ``tag``) from each: its payload, or ``payload[part]`` when one message carries
    several named dicts. Received values are cast to ``own``'s dtypes (any wire dtype).

    The weight of a neighbour whose message was lost stays with the client's own tensors,
    so the weights still sum to one; without faults this is the plain gossip average.
    ``robust`` (a ``strategy.robust`` rule other than ``mean``): the neighbours' tensors
    combined by that rule instead (:func:`decent.robust.neighbourhood.robust_average`).
    Returns new tensors; ``own`` is not written."""
    if not isinstance(inbox, Inbox):  # the bare messages (a benchmark, a hand-made test)
        inbox = Inbox.of(inbox, client.cid, ctx)
    keep, weights, newest = mixing_weights(client, inbox, ctx, tag)
    payloads = {src: msg.payload if part is None else msg.payload[part]
                for src, msg in newest.items()}
    if is_robust(robust):
        return robust_average(robust, own, keep, weights, payloads)  # type: ignore[arg-type]
    return weighted_sum(own, keep, weights, payloads)


def is_robust(robust: AggregatorConfig | None) -> bool:
    """Whether ``robust`` asks for more than the plain gossip average."""
    return robust is not None and robust.name != "mean"


@torch.no_grad()
def weighted_sum(own: Tensors, keep: float, weights: dict[int, float],
                 payloads: dict[int, Tensors]) -> Tensors:
    """keep · own + Σ_j w_j payload_j, tensor by tensor, in source order (the sum's order
    is fixed); received values cast to ``own``'s dtypes. New tensors."""
    mixed = {name: keep * t for name, t in own.items()}
    for src, payload in payloads.items():
        for name, value in payload.items():
            mixed[name] += weights[src] * value.to(mixed[name].dtype)
    return mixed


def mixing_weights(client: Client[Any], inbox: Inbox, ctx: PhaseContext,
                   tag: str | None) -> tuple[float, dict[int, float], dict[int, Message]]:
    """The weight client i keeps for its own tensors (w_ii plus each silent neighbour's),
    each sender's w_ij, and the newest message (of ``tag``) from each sender."""
    w = ctx.graph.weights[client.cid]
    newest = inbox.newest(tag)
    keep = w[client.cid] + sum(w[j] for j in ctx.graph.neighbors[client.cid]
                               if j not in newest)
    return keep, {src: w[src] for src in newest}, newest


@torch.no_grad()
def average_with_neighbours(client: Client[Any], inbox: Inbox | list[Message],
                            ctx: PhaseContext, tag: str | None = None,
                            robust: AggregatorConfig | None = None) -> None:
    """Mix the client's trainable tensors with its neighbours' (each message's payload a
    name → tensor dict): θ_i ← Σ_j w_ij θ_j, by :func:`mix_with_neighbours` (or by the
    rule ``robust``)."""
    batched = ctx.runner
    if batched is not None and not is_robust(robust):  # the process mixes its clients together
        if not isinstance(inbox, Inbox):
            inbox = Inbox.of(inbox, client.cid, ctx)
        keep, weights, newest = mixing_weights(client, inbox, ctx, tag)
        batched(MixRequest(client, keep, weights,
                           {src: msg.payload for src, msg in newest.items()}))
        return
    live = params.trainable_params(client.model)
    params.load(client.model, mix_with_neighbours(client, live, inbox, ctx, tag=tag,
                                                  robust=robust))
