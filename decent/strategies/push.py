"""Push-sum gossip over a directed graph: column-stochastic mixing, in which each client
splits its mass (a numerator x and a weight w) among itself and its out-neighbours, and
reads the ratio z = x / w. Part of the toolkit (:mod:`decent.strategies.toolkit`).

A client's model holds the de-biased z; x = w · z is formed only when it is sent, so
evaluation, consensus and checkpoints see the value push-sum reports."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from decent.core.messages import Message, Scalar
from decent.models import params
from decent.robust.aggregators import AggregatorConfig
from decent.robust.neighbourhood import robust_average
from decent.strategies.base import Client, PhaseContext
from decent.strategies.gossip import weighted_sum
from decent.strategies.inbox import Inbox
from decent.strategies.step_batching import MixRequest

Tensors = dict[str, torch.Tensor]
PUSH_TAG = "push"


def as_float32(value: float) -> float:
    """``value`` rounded to float32: the push-sum weight is a float32 on the wire (4
    bytes) and kept as one, as the numerators are."""
    return float(np.float32(value))


@torch.no_grad()
def push_to_out_neighbours(client: Client[Any], ctx: PhaseContext, weight: float,
                           overlap: int = 0) -> tuple[list[Message], float]:
    """The messages that push client i's mass: to each out-neighbour j its share p_ji of
    the numerator x = w · z (the trainable tensors) and of the weight w; and the share
    p_ii that i keeps. ``overlap`` (τ ≥ 1): the transfers overlap i's next τ phases
    (OSGP). A neighbour believed gone gets nothing; its share stays with i."""
    shares = ctx.graph.weights[client.cid]
    out = [j for j in ctx.graph.neighbors[client.cid] if ctx.alive is None or j in ctx.alive]
    keep = shares[client.cid] + sum(shares[j] for j in ctx.graph.neighbors[client.cid]
                                    if j not in out)
    z = params.snapshot(client.model)
    payloads: dict[float, dict[str, Any]] = {}  # one payload per distinct share
    messages = []
    for j in out:
        p = shares[j]
        if p not in payloads:
            scale = p * weight
            payloads[p] = {"x": {name: t * scale for name, t in z.items()},
                           "w": Scalar(as_float32(p * weight))}
        messages.append(Message(client.cid, j, PUSH_TAG, payloads[p], overlap=overlap))
    return messages, keep


def sum_received(inbox: Inbox) -> tuple[dict[int, Tensors], float]:
    """The numerators received, by sender (in source order), and the sum of the weights:
    push-sum adds every message, old or new (a message is mass, not a newer copy)."""
    numerators: dict[int, Tensors] = {}
    total = 0.0
    for msg in inbox:
        if msg.tag != PUSH_TAG:
            continue
        x = msg.payload["x"]
        if msg.src in numerators:  # two from one sender (a delayed one): add them
            x = {name: numerators[msg.src][name] + t for name, t in x.items()}
        numerators[msg.src] = x
        total += msg.payload["w"].value
    return numerators, total


@torch.no_grad()
def absorb(client: Client[Any], ctx: PhaseContext, own: float, weight: float,
           numerators: dict[int, Tensors], received: float) -> float:
    """Add the received mass to client i's: w' = own · w + Σ w_j and
    z' = (own · w · z + Σ x_j) / w', written to the model as one gossip mix
    (keep = own · w / w', each x_j at 1 / w'). ``own``: the share of its mass i kept
    (p_ii when it pushed this phase; 1 when its pushes are already out). The new w'."""
    kept = as_float32(own * weight)
    total = as_float32(kept + received)
    keep = kept / total
    weights = {src: 1.0 / total for src in numerators}
    if ctx.runner is not None:  # the process mixes its clients together
        ctx.runner(MixRequest(client, keep, weights, numerators))
        return total
    z = params.trainable_params(client.model)
    mixed = weighted_sum(z, keep, weights, numerators)
    params.load(client.model, mixed)
    return total


@torch.no_grad()
def absorb_robustly(client: Client[Any], ctx: PhaseContext, own: float, weight: float,
                    inbox: Inbox, robust: AggregatorConfig) -> float:
    """:func:`absorb` with a robust rule (``strategy.robust``): each sender's pushes
    de-biased, z_j = x_j / w_j, and z_i' = the rule over {z_i} ∪ {z_j} with the weights
    push-sum gives them (own·w / w' and w_j / w', w' = own·w + Σ w_j). A push of
    non-positive weight carries no mass (an attacker's): it is left out. The new weight
    is 1: a Byzantine neighbour keeps the mass it is sent, so a bookkept w' would shrink
    and the steps γ / w' grow without bound; the rule's z_i' is the model, its mass reset
    (on the doubly stochastic graphs where honest push-sum keeps w = 1, the same)."""
    pushes: dict[int, tuple[Tensors, float]] = {}
    for msg in inbox:
        if msg.tag != PUSH_TAG:
            continue
        x, w = msg.payload["x"], msg.payload["w"].value
        if msg.src in pushes:  # two from one sender (a delayed one): their mass adds
            x = {name: pushes[msg.src][0][name] + t for name, t in x.items()}
            w += pushes[msg.src][1]
        pushes[msg.src] = (x, w)
    mass = {src: xw for src, xw in pushes.items() if xw[1] > 0}
    kept = as_float32(own * weight)
    total = as_float32(kept + sum(w for _, w in mass.values()))
    z = params.trainable_params(client.model)
    ratios = {src: {name: t / w for name, t in x.items()} for src, (x, w) in mass.items()}
    mixed = robust_average(robust, z, kept / total,
                           {src: w / total for src, (_, w) in mass.items()}, ratios)
    params.load(client.model, mixed)
    return 1.0
