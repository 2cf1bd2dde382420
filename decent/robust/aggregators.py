"""Robust aggregation: one vector from m received ones, some possibly Byzantine.

Each rule takes the received vectors stacked as an (m, d) tensor and returns a d-vector:

* ``mean`` — the plain average (no defence: one client can move it anywhere);
* ``trimmed_mean`` — per coordinate, drop the f largest and f smallest values and average
  the rest (Yin et al., 2018), f = ⌈β·m⌉ (at most (m − 1)/2, so one value stays); β = 0.1
  by default, DSO's choice, which tolerates up to a β fraction of Byzantine senders per
  coordinate. A β fraction of m senders can be ⌈β·m⌉ of them: ⌊β·m⌋ would let one through
  whenever β·m is not a whole number — β = 0.1 over an aggregator's 8 workers would trim
  nothing — and the nearest-by-latency tiers are rarely of equal size;
* ``median`` — the coordinate-wise median (Yin et al., 2018); for an even m, the mean of
  the two middle values;
* ``krum`` — the one received vector whose summed squared distance to its m − f − 2
  nearest others is smallest, f = ⌈β·m⌉ the assumed number of Byzantine senders
  (Blanchard et al., 2017); it needs m > 2f + 2, and with fewer vectors the median is
  taken instead (``aggregate``; calling :func:`krum` itself raises);
* ``multi_krum`` — the mean of the m − f vectors of smallest Krum score (Blanchard et al.,
  2017, §4: multi-Krum with its m − f selected);
* ``geometric_median`` — the smoothed Weiszfeld iteration from zero (Pillutla et al.,
  2022, RFA: T iterations, distances floored at ν), as ByzFL's ``GeometricMedian`` and the
  decentralized authors' ``RFA`` (epfml/byzantine-robust-decentralized-optimizer,
  ``codes/aggregator.py``) run it;
* ``centered_clip`` — L iterations of v ← v + mean_j clip(x_j − v, τ) (Karimireddy, He &
  Jaggi, 2021), from zero on a server (ByzFL's ``CenteredClipping`` without history) and
  from the client's own model in a neighbourhood (:mod:`decent.robust.neighbourhood`);
* ``clipped_gossip`` — a neighbourhood rule only (He, Karimireddy & Jaggi, 2022):
  x_i + Σ_j w_ij clip(x_j − x_i, τ_i) (:mod:`decent.robust.neighbourhood`).

Sums run in float64 in a fixed order, so a result depends only on the set of inputs and
their order, never on the backend.

The rules are registered in :data:`AGGREGATORS` (name → config class + builder), and a
section such as ``aggregator: {name: trimmed_mean, trim: 0.2}`` (or a bare name) picks
one; a user's module (``imports:``) registers a rule of its own the same way, with a
builder ``build(cfg) -> rule`` and ``rule(stacked (m, d)) -> (d,)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from decent.core.errors import ConfigError
from decent.core.registry import Registry, component
from decent.core.schema import at_least, in_range, positive, text

# one rule: the received vectors stacked as (m, d) → the aggregate (d,)
Rule = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class AggregatorConfig:
    """A rule without parameters of its own (``mean``, ``median``, ``weighted_mean``)."""

    # the rule: mean, trimmed_mean, median, krum, multi_krum, geometric_median,
    # centered_clip, clipped_gossip (gossip only), weighted_mean (DSO's top level only), or
    # one a module of `imports` registers
    name: str = text("mean", nullable=False)


@dataclass
class TrimmedMeanConfig(AggregatorConfig):
    name: str = "trimmed_mean"
    # β: per coordinate, ⌈β·m⌉ values dropped on each side
    trim: float = in_range(0.1, 0, 0.5, hi_open=True)


@dataclass
class KrumConfig(AggregatorConfig):
    name: str = "krum"
    # f / m: the assumed fraction of Byzantine senders (f = ⌈β·m⌉)
    byzantine: float = in_range(0.1, 0, 0.5, hi_open=True)


@dataclass
class GeometricMedianConfig(AggregatorConfig):
    name: str = "geometric_median"
    iters: int = at_least(1, 3)  # T: Weiszfeld iterations from zero (ByzFL's 3)
    nu: float = positive(0.1)  # ν: distances below it count as ν (ByzFL's and RFA's 0.1)


@dataclass
class CenteredClipConfig(AggregatorConfig):
    name: str = "centered_clip"
    tau: float = positive(10.0)  # τ: each x_j − v clipped to this norm
    iters: int = at_least(1, 1)  # L: clipping iterations (ByzFL's 1)


@dataclass
class ClippedGossipConfig(AggregatorConfig):
    """ClippedGossip (self-centered clipping): a neighbourhood rule only."""

    name: str = "clipped_gossip"
    # τ_i: None adapts it each mix, as the authors' code does: the (b + 1)-th largest of
    # the distances ‖x_j − x_i‖ to the neighbours heard from, so the b farthest are clipped
    tau: float | None = positive(None, nullable=True)
    byzantine: int = at_least(0, 1)  # b: the Byzantine neighbours a client assumes


# the rules that clip toward, or start from, the aggregating client's own model: they
# exist only where there is one (a gossip neighbourhood), not on a server
NEIGHBOURHOOD_ONLY = ("clipped_gossip",)


def assumed_byzantine(beta: float, m: int) -> int:
    """⌈β·m⌉: how many of m senders a Byzantine fraction β can be (the 1e-9 keeps float
    error from rounding 0.1·30 = 3.0000000000000004 up to 4)."""
    return math.ceil(beta * m - 1e-9)


def mean(stacked: torch.Tensor, beta: float = 0.0) -> torch.Tensor:
    return stacked.double().mean(dim=0).to(stacked.dtype)


def trimmed_mean(stacked: torch.Tensor, beta: float = 0.1) -> torch.Tensor:
    m = stacked.shape[0]
    cut = min(assumed_byzantine(beta, m), (m - 1) // 2)
    ordered = torch.sort(stacked.double(), dim=0).values
    return ordered[cut: m - cut].mean(dim=0).to(stacked.dtype)


def median(stacked: torch.Tensor, beta: float = 0.0) -> torch.Tensor:
    # torch.median returns the lower middle value for an even count: average the two
    ordered = torch.sort(stacked.double(), dim=0).values
    m = stacked.shape[0]
    middle = ordered[(m - 1) // 2] if m % 2 else (ordered[m // 2 - 1] + ordered[m // 2]) / 2
    return middle.to(stacked.dtype)


def krum(stacked: torch.Tensor, beta: float = 0.1) -> torch.Tensor:
    m = stacked.shape[0]
    f = assumed_byzantine(beta, m)
    if m <= 2 * f + 2:
        raise ValueError(f"krum needs more than 2f + 2 = {2 * f + 2} vectors, got {m}")
    return stacked[int(torch.argmin(krum_scores(stacked, f)))].clone()


def krum_scores(stacked: torch.Tensor, f: int) -> torch.Tensor:
    """Each vector's summed squared distance to its m − f − 2 nearest others."""
    m = stacked.shape[0]
    flat = stacked.double()
    distances = torch.cdist(flat, flat).square()
    return torch.sort(distances, dim=1).values[:, 1: m - f - 1].sum(dim=1)


def multi_krum(stacked: torch.Tensor, beta: float = 0.1) -> torch.Tensor:
    m = stacked.shape[0]
    f = assumed_byzantine(beta, m)
    if m <= 2 * f + 2:
        raise ValueError(f"multi_krum needs more than 2f + 2 = {2 * f + 2} vectors, got {m}")
    # a stable sort: equal scores keep the senders' order
    chosen = torch.sort(krum_scores(stacked, f), stable=True).indices[: m - f]
    return stacked.double()[chosen].mean(dim=0).to(stacked.dtype)


def geometric_median(stacked: torch.Tensor, iters: int = 3, nu: float = 0.1) -> torch.Tensor:
    flat = stacked.double()
    z = torch.zeros_like(flat[0])
    for _ in range(iters):
        betas = (1.0 / flat.shape[0]) / torch.linalg.vector_norm(flat - z, dim=1).clamp_min(nu)
        z = (flat * betas[:, None]).sum(dim=0) / betas.sum()
    return z.to(stacked.dtype)


def centered_clip(stacked: torch.Tensor, tau: float = 10.0, iters: int = 1,
                  center: torch.Tensor | None = None) -> torch.Tensor:
    flat = stacked.double()
    v = torch.zeros_like(flat[0]) if center is None else center.double().clone()
    for _ in range(iters):
        diff = flat - v
        norm = torch.linalg.vector_norm(diff, dim=1)
        # min(1, τ/‖d‖); a zero difference stays zero (its factor is immaterial)
        scale = torch.where(norm > tau, tau / norm.clamp_min(1e-300), torch.ones_like(norm))
        v = v + (diff * scale[:, None]).mean(dim=0)
    return v.to(stacked.dtype)


def krum_or_median(stacked: torch.Tensor, beta: float) -> torch.Tensor:
    """Krum where it is defined (m > 2f + 2), the median with fewer vectors."""
    if stacked.shape[0] <= 2 * assumed_byzantine(beta, stacked.shape[0]) + 2:
        return median(stacked)
    return krum(stacked, beta)


def _neighbourhood_only(cfg: AggregatorConfig) -> Rule:
    raise ConfigError("strategy.robust", f"{cfg.name} clips toward the aggregating client's "
                      "own model: a gossip method's rule, not a server's; use centered_clip")


def _only_on_top(cfg: AggregatorConfig) -> Rule:
    raise ConfigError("strategy.aggregator", "weighted_mean weighs each aggregator by the "
                      "payloads it served: DSO's top_aggregator only")


AGGREGATORS = Registry("aggregator")
AGGREGATORS.register("mean", AggregatorConfig, lambda cfg: mean)
AGGREGATORS.register("median", AggregatorConfig, lambda cfg: median)
AGGREGATORS.register("trimmed_mean", TrimmedMeanConfig,
                     lambda cfg: partial(trimmed_mean, beta=cfg.trim))
AGGREGATORS.register("krum", KrumConfig, lambda cfg: partial(krum_or_median, beta=cfg.byzantine))
AGGREGATORS.register("multi_krum", KrumConfig, lambda cfg: partial(multi_krum, beta=cfg.byzantine))
AGGREGATORS.register("geometric_median", GeometricMedianConfig,
                     lambda cfg: partial(geometric_median, iters=cfg.iters, nu=cfg.nu))
AGGREGATORS.register("centered_clip", CenteredClipConfig,
                     lambda cfg: partial(centered_clip, tau=cfg.tau, iters=cfg.iters))
AGGREGATORS.register("clipped_gossip", ClippedGossipConfig, _neighbourhood_only)
# built by the caller, which has the weights (see weighted_mean); registered so that it is
# a name a section may give
AGGREGATORS.register("weighted_mean", AggregatorConfig, _only_on_top)


def weighted_mean(vectors: list[torch.Tensor], weights: list[float]) -> torch.Tensor:
    """Σ w_i v_i / Σ w_i in float64, in the given order (not robust: DSO's top level, over
    trusted aggregators, each weighted by the workers it aggregated)."""
    if not vectors or len(vectors) != len(weights):
        raise ValueError(f"{len(vectors)} vectors and {len(weights)} weights")
    total = float(sum(weights))
    out = torch.zeros(vectors[0].shape, dtype=torch.float64, device=vectors[0].device)
    for v, w in zip(vectors, weights, strict=True):
        out += (w / total) * v.double()
    return out.to(vectors[0].dtype)


def build_aggregator(cfg: AggregatorConfig | str) -> Rule:
    """The rule ``cfg`` selects (a config, or a bare name with its default fields)."""
    if isinstance(cfg, str):
        cfg = AGGREGATORS.config(cfg, "strategy.aggregator")
    return AGGREGATORS.entry(cfg.name, "strategy.aggregator").build(cfg)


def aggregate(rule: Rule | AggregatorConfig | str, vectors: list[torch.Tensor]
              ) -> torch.Tensor:
    """``rule`` (built, or its config) over ``vectors`` (same shape each), in their order."""
    if not callable(rule):
        rule = build_aggregator(rule)
    if not vectors:
        raise ValueError("nothing to aggregate")
    shape = vectors[0].shape
    stacked = torch.stack([v.reshape(-1) for v in vectors])
    return rule(stacked).reshape(shape)


def robust_field() -> Any:
    """A method's ``robust`` section: the rule that combines what it received ({name:
    mean} by default: the method as published; ``decent config schema aggregator``)."""
    return field(default_factory=AggregatorConfig, metadata=component(AGGREGATORS))
