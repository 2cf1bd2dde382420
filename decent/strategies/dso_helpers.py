"""DSO's helpers beside :mod:`decent.strategies.dso`: a worker's sensitivity probe, and
how far the aggregators' push-pull gossip spreads their sets (the rounds it takes and
the expected coverage after each, to choose ``gossip_rounds`` and ``fanout`` and to
check the measured ``coverage_k`` against)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from decent.core.errors import ConfigError
from decent.models.sensitivity import activation_sensitivity
from decent.strategies.base import Client, PhaseContext

PROBE_SEED = 0  # the public probe batches' generator: the same for every worker


def probe_sensitivity(client: Client[Any], ctx: PhaseContext, probe: str, batch_size: int,
                      probe_batches: int) -> dict[str, torch.Tensor]:
    """Activation sensitivity on fixed probe batches, the same at every recomputation.
    ``public``: from the task's held-out split with one generator for every worker, so
    that s — and the entries it selects — depends on no worker's data; ``private``:
    from the worker's shard, with a generator seeded by its id."""
    if probe == "public":
        data = ctx.task.public_data()
        if data is None:
            raise ConfigError("strategy.probe", f"task '{ctx.task.name}' has no public "
                              "held-out split to probe: use probe=private without DP, "
                              "or semantic=false")
        generator = torch.Generator().manual_seed(PROBE_SEED)
    else:
        data, generator = client.data, torch.Generator().manual_seed(client.cid)
    device = next(client.model.parameters()).device
    batches = [tuple(t.to(device) for t in data.sample(batch_size, generator))
               for _ in range(probe_batches)]
    return activation_sensitivity(client.model, batches, ctx.task.loss)


def expected_coverage_rounds(aggregators: int, fanout: int) -> int:
    """⌈log_f A⌉: the gossip rounds after which every aggregator holds every ĝ w.h.p."""
    return max(1, int(np.ceil(np.log(aggregators) / np.log(max(fanout, 2)) - 1e-12)))


def push_pull_coverage(aggregators: int, fanout: int, rounds: int) -> list[float]:
    """E[coverage_k], k = 1..rounds: the expected share of aggregators holding a given ĝ
    after k push-pull rounds, each aggregator pushing to f = min(fanout, A − 1) uniformly
    drawn others and pulling their sets, all between the sets held at the round's start.

    Exact, by a Markov chain over n, the aggregators holding ĝ. From n, an uninformed
    aggregator u is reached by a push from each of the n independently with probability
    f/(A − 1), and pulls from an informed one unless its f peers all miss them, with
    probability 1 − C(A − 1 − n, f)/C(A − 1, f). The pushes of the n informed are
    dependent across u (each sends exactly f), so their union over the A − n uninformed
    is built up one sender at a time; the pulls of the rest are independent. By symmetry
    the mean over aggregators of |G|/A is E[n]/A."""
    from math import comb

    A, f = aggregators, min(fanout, aggregators - 1)
    if A == 1:
        return [1.0] * rounds

    def hypergeom(total: int, good: int, draws: int) -> np.ndarray:
        """P(k good among ``draws`` of ``total`` without replacement), k = 0..draws."""
        return np.array([comb(good, k) * comb(total - good, draws - k) / comb(total, draws)
                         for k in range(draws + 1)])

    def step(n: int) -> np.ndarray:
        """The distribution of the informed count after one round from n."""
        u = A - n
        covered = np.zeros(u + 1)  # uninformed reached by pushes so far
        covered[0] = 1.0
        hits = hypergeom(A - 1, u, f)  # a sender's peers among the uninformed
        for _ in range(n):
            nxt = np.zeros(u + 1)
            for m in range(u + 1):
                if covered[m] == 0:
                    continue
                for h, ph in enumerate(hits):
                    if ph == 0:
                        continue
                    fresh = hypergeom(u, u - m, h)  # of its h, those not reached before
                    for new, pn in enumerate(fresh):
                        if pn:
                            nxt[m + new] += covered[m] * ph * pn
            covered = nxt
        pull = 1 - comb(max(A - 1 - n, 0), f) / comb(A - 1, f)
        out = np.zeros(A + 1)
        for m in range(u + 1):
            rest = u - m
            for j in range(rest + 1):
                out[n + m + j] += covered[m] * comb(rest, j) * pull**j * (1 - pull)**(rest - j)
        return out

    dist = np.zeros(A + 1)
    dist[1] = 1.0
    result = []
    for _ in range(rounds):
        nxt = np.zeros(A + 1)
        for n in range(1, A + 1):
            if dist[n]:
                nxt += dist[n] * step(n)
        dist = nxt
        result.append(float(dist @ np.arange(A + 1)) / A)
    return result
