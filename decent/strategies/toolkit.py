"""The contract's toolkit: what a method's phases compute with, besides the local
optimiser loops of :mod:`decent.strategies.local_training`.

* :func:`gradient` / :func:`stochastic_gradient` — one gradient of the task loss at the
  client's model (a gradient method's ∇f_i(x; ξ), no optimiser step);
* :func:`private_gradient` — DP-SGD's gradient before its noise: a Poisson sample of the
  shard, each example's gradient clipped, their sum over the expected batch size;
* :func:`shard_batches` / :func:`shard_gradient` — the client's whole shard, every example
  exactly once (``ClientData.sample`` draws with replacement), and the full local
  gradient ∇f_i(x) over it;
* :func:`mix_with_neighbours` — Σ_j w_ij t_j for any tensors of the state (a tracker, a
  public copy), with the round graph's mixing weights; :func:`average_with_neighbours`
  is it applied to the model;
* :func:`push_to_out_neighbours` / :func:`sum_received` / :func:`absorb` — push-sum's
  three steps on a directed graph (column-stochastic mixing,
  :mod:`decent.strategies.push`).

Every function reads the client's own RNG only where it says so, so it never shifts
another stream.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from decent.models import params
from decent.privacy.gaussian import clipped_mean
from decent.strategies.base import Client
from decent.strategies.gossip import average_with_neighbours, mix_with_neighbours
from decent.strategies.per_example import per_example_gradients
from decent.strategies.push import absorb, push_to_out_neighbours, sum_received
from decent.tasks.base import ClientData, Task

Tensors = dict[str, torch.Tensor]
__all__ = ["absorb", "average_with_neighbours", "gradient", "mix_with_neighbours",
           "private_gradient", "push_to_out_neighbours", "shard_batches", "shard_gradient",
           "stochastic_gradient", "sum_received"]


def gradient(client: Client[Any], task: Task,
             batch: tuple[torch.Tensor, ...]) -> tuple[float, Tensors]:
    """The loss of the client's model on ``batch`` and its gradient with respect to every
    trainable tensor (detached copies, by name); the model's ``.grad`` is left alone.
    Charges no compute: see :func:`stochastic_gradient`."""
    client.model.train()
    live = params.trainable_params(client.model)
    loss = task.loss(client.model, batch)
    grads = torch.autograd.grad(loss, list(live.values()))
    return float(loss.detach()), {name: t.detach().clone()
                                  for name, t in zip(live, grads, strict=True)}


def stochastic_gradient(client: Client[Any], task: Task, batch_size: int,
                        charge: bool = True) -> tuple[float, Tensors]:
    """:func:`gradient` on one batch drawn from the client's shard with its own
    generator; charged as one step of compute unless ``charge`` is False (a method that
    charges a gradient in parts itself, e.g. over several ticks)."""
    if charge:
        client.count_steps(1)
    return gradient(client, task, client.data.sample(batch_size, client.generator))


def private_gradient(client: Client[Any], task: Task, batch_size: int, clip: float,
                     charge: bool = True) -> tuple[float | None, Tensors]:
    """DP-SGD's update before its noise (:mod:`decent.privacy.gaussian`): a Poisson
    sample of the client's shard at rate min(1, B/|D|) drawn with its own generator, each
    example's gradient clipped to L2 norm ``clip`` over all trainable tensors jointly,
    their sum divided by B = ``batch_size``. With it, the sample's mean loss (None for an
    empty sample). Charged like :func:`stochastic_gradient`."""
    if charge:
        client.count_steps(1)
    batch = client.data.poisson_sample(min(1.0, batch_size / len(client.data)),
                                       client.generator)
    losses, grads = per_example_gradients(client.model, task, batch)
    update, _ = clipped_mean(grads, clip, batch_size)
    return (float(losses.mean()) if len(losses) else None), update


def shard_batches(data: ClientData, batch_size: int) -> Iterator[tuple[torch.Tensor, ...]]:
    """The shard in order, ``batch_size`` examples at a time (the last batch may be
    smaller): every example exactly once, and no RNG drawn."""
    for lo in range(0, len(data), batch_size):
        idx = torch.arange(lo, min(lo + batch_size, len(data)), device=data.x.device)
        yield data.rows(idx)


def shard_gradient(client: Client[Any], task: Task,
                   batch_size: int) -> tuple[float, Tensors]:
    """The full local loss f_i(x) and gradient ∇f_i(x): the mean over the client's whole
    shard, computed in batches and weighted by their sizes (the task's loss is a mean
    over a batch). Charged as one step per batch."""
    total, n = 0.0, len(client.data)
    summed: Tensors = {}
    for batch in shard_batches(client.data, batch_size):
        size = int(batch[0].shape[0])
        loss, grads = gradient(client, task, batch)
        client.count_steps(1)
        total += loss * size / n
        for name, g in grads.items():
            part = g * (size / n)
            summed[name] = part if name not in summed else summed[name] + part
    return total, summed
