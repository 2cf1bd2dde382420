"""A robust neighbour average: what a gossiping client makes of the models it received
when some of its neighbours may lie (``strategy.robust``).

Client i holds x_i and has heard x_j from the neighbours j of this round (the round
graph's weights w_ij; ``keep`` = w_ii plus the weight of every neighbour not heard from):

* ``mean`` — keep·x_i + Σ_j w_ij x_j: the method's own gossip average, unchanged;
* ``clipped_gossip`` — x_i + Σ_j w_ij clip(x_j − x_i, τ_i) (He, Karimireddy & Jaggi, 2022,
  "Byzantine-robust decentralized learning via ClippedGossip", self-centered clipping:
  each neighbour may pull x_i by at most τ_i). τ_i is the config's, or, left unset, the
  authors' adaptive choice (``SelfCenteredClipping`` in
  epfml/byzantine-robust-decentralized-optimizer, ``codes/aggregator.py``: the second
  largest distance, so the farthest neighbour is clipped), generalised to the (b + 1)-th
  largest distance for b assumed Byzantine neighbours;
* ``centered_clip`` — centered clipping started from x_i over {x_i} ∪ {x_j};
* any other registered rule (``trimmed_mean``, ``median``, ``krum``, ``multi_krum``,
  ``geometric_median``, or a user's) — over the stack x_i, x_j… unweighted, as the
  decentralized authors' ``DeTM``, ``DeCM``, ``DeKrum`` and ``DeRFA`` take
  ``[local] + neighbors``.

A client's tensors are flattened into one vector (name order) so that a distance or a
norm is the whole model's; sums run in float64 in the senders' order, so a result depends
only on what arrived, never on the backend.
"""

from __future__ import annotations

import torch

from decent.core.errors import ConfigError
from decent.robust.aggregators import (
    AGGREGATORS,
    AggregatorConfig,
    KrumConfig,
    assumed_byzantine,
    centered_clip,
)

Tensors = dict[str, torch.Tensor]


def too_few(cfg: AggregatorConfig, m: int, what: str) -> str | None:
    """Why the rule ``cfg`` cannot combine ``m`` models (``what`` they are), or None."""
    if not isinstance(cfg, KrumConfig):
        return None
    f = assumed_byzantine(cfg.byzantine, m)
    if m <= 2 * f + 2:
        return (f"{cfg.name} over {what} ({m} models) assuming f = ⌈{cfg.byzantine}·{m}⌉ = "
                f"{f} Byzantine needs more than 2f + 2 = {2 * f + 2}; use a smaller byzantine "
                "fraction, more clients or a denser graph, or trimmed_mean / median")
    return None


def check_robust(cfg: AggregatorConfig, degrees: tuple[int, ...] | None) -> None:
    """``strategy.robust`` refused in one line where it cannot run over a client and its
    neighbours on this graph (a graph redrawn each round has no degrees to check)."""
    problem = None if not degrees else too_few(
        cfg, min(degrees) + 1, f"a client and its {min(degrees)} neighbours (the graph's "
        "smallest degree)")
    if problem is not None:
        raise ConfigError("strategy.robust", problem)


def flat(tensors: Tensors, names: list[str]) -> torch.Tensor:
    return torch.cat([tensors[n].detach().reshape(-1).double() for n in names])


def unflat(vector: torch.Tensor, like: Tensors, names: list[str]) -> Tensors:
    out, at = {}, 0
    for n in names:
        t = like[n]
        out[n] = vector[at: at + t.numel()].view(t.shape).to(t.dtype)
        at += t.numel()
    return out


def adaptive_tau(distances: torch.Tensor, byzantine: int) -> float:
    """The (b + 1)-th largest distance (the largest where fewer were heard)."""
    ordered = torch.sort(distances, descending=True).values
    return float(ordered[min(byzantine, len(ordered) - 1)])


def clip_rows(diff: torch.Tensor, tau: float) -> torch.Tensor:
    """Each row of ``diff`` scaled to norm at most τ."""
    norm = torch.linalg.vector_norm(diff, dim=1)
    scale = torch.where(norm > tau, tau / norm.clamp_min(1e-300), torch.ones_like(norm))
    return diff * scale[:, None]


@torch.no_grad()
def robust_average(cfg: AggregatorConfig, own: Tensors, keep: float,
                   weights: dict[int, float], payloads: dict[int, Tensors]) -> Tensors:
    """Client i's new tensors from its own ``own`` and the ``payloads`` heard (source
    order), by the rule ``cfg``; ``keep`` and ``weights`` are the gossip weights (they sum
    to one). New tensors; ``own`` is not written."""
    if not payloads:
        return {n: t.clone() for n, t in own.items()}
    names = list(own)
    x_i = flat(own, names)
    received = torch.stack([flat(p, names) for p in payloads.values()])
    if cfg.name == "mean":
        w = torch.tensor([weights[src] for src in payloads], dtype=torch.float64)
        mixed = keep * x_i + (w[:, None] * received).sum(dim=0)
    elif cfg.name == "clipped_gossip":
        diff = received - x_i
        tau = cfg.tau if cfg.tau is not None else adaptive_tau(  # type: ignore[attr-defined]
            torch.linalg.vector_norm(diff, dim=1), cfg.byzantine)  # type: ignore[attr-defined]
        w = torch.tensor([weights[src] for src in payloads], dtype=torch.float64)
        mixed = x_i + (w[:, None] * clip_rows(diff, tau)).sum(dim=0)
    elif cfg.name == "centered_clip":
        mixed = centered_clip(torch.cat([x_i[None], received]), cfg.tau,  # type: ignore[attr-defined]
                              cfg.iters, center=x_i)  # type: ignore[attr-defined]
    else:
        rule = AGGREGATORS.entry(cfg.name, "strategy.robust").build(cfg)
        mixed = rule(torch.cat([x_i[None], received]))
    return unflat(mixed, own, names)
