"""The Gaussian mechanism of DP-SGD on a client's gradient, and the privacy it spends.

**Mechanism** (Abadi et al. 2016). Each step a client

1. draws a *Poisson sample* of its shard D: every example independently with
   probability q = min(1, B/|D|), from the client's own generator
   (:meth:`~decent.tasks.base.ClientData.poisson_sample`), so the batch size varies
   around B (``batch_size``);
2. takes each sampled example's gradient (:mod:`decent.strategies.per_example`), clips
   it jointly over every trainable tensor to L2 norm ``clip`` = C, sums the clipped
   gradients and divides by B (:func:`clipped_mean`) — the *expected* batch size, a
   constant, so that adding or removing one example moves the result by at most C/B
   whatever the sample's size;
3. adds N(0, σ²) to every coordinate (:func:`add_noise_`), with the noise scale DSO's
   report writes

       σ = C · sqrt(2 ln(1.25/δ)) / (ε · N)

   (the classic Gaussian-mechanism calibration of Dwork & Roth, Thm A.1, for a mean of
   N contributions each clipped to C).

**Accounting.** What a run spends is not read off that formula: :class:`PrivacyLedger`
composes every noised release with the Rényi-DP accountant of Google's
``dp-accounting`` (Mironov, 2017), ``RdpAccountant``, and converts to (ε, δ). One release
is the event ``PoissonSampledDpEvent(q, GaussianDpEvent(z))`` under the accountant's
default add-or-remove-one neighbouring relation: the sum of clipped gradients has
sensitivity C under that relation and carries noise of std σ·B, so the noise multiplier
is z = σ·B / C.

**Why Poisson sampling.** Drawing B examples with replacement — a client's ordinary batch
(:meth:`~decent.tasks.base.ClientData.sample`) — would be the event
``SampledWithReplacementDpEvent``, which ``RdpAccountant`` (dp-accounting 0.6) cannot
compose; its only fixed-size sampling event, ``SampledWithoutReplacementDpEvent``,
needs the replace-one relation, under which one example moves the sum by 2C. Poisson
sampling is the accountant's own model of DP-SGD (and Opacus's): the sampling the
mechanism does is the sampling the accountant assumes, at the relation whose
sensitivity the clipping bounds.
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from decent.core.schema import at_least, in_range, positive
from decent.core.storable import storable


@dataclass
class DPConfig:
    """``enabled``: DP-SGD on every honest worker's gradient (Poisson sampling,
    per-example clipping, Gaussian noise); ``population`` is N in σ (None: the number of
    workers)."""

    enabled: bool = False  # DP-SGD on every honest worker's gradient
    clip: float = positive(1.0)  # the L2 norm each example's gradient is clipped to (C)
    epsilon: float = positive(8.0)  # DSO's ε
    delta: float = in_range(1e-6, 0, 1, lo_open=True, hi_open=True)  # DSO's δ
    # N in the noise scale σ; None: the number of workers
    population: int | None = at_least(1, None, nullable=True)


def noise_std(clip: float, epsilon: float, delta: float, population: int) -> float:
    """σ = C·sqrt(2 ln(1.25/δ)) / (ε·N)."""
    return clip * math.sqrt(2 * math.log(1.25 / delta)) / (epsilon * population)


@torch.no_grad()
def add_noise_(tensors: dict[str, torch.Tensor], std: float,
               generator: torch.Generator) -> None:
    """Add N(0, std²) to every coordinate, drawn on the CPU from ``generator`` in name
    order (the same noise on every device and backend)."""
    for name in sorted(tensors):
        t = tensors[name]
        z = torch.randn(t.shape, generator=generator, dtype=torch.float32)
        t.add_(z.to(t.device, t.dtype), alpha=std)


@torch.no_grad()
def clipped_mean(grads: dict[str, torch.Tensor], clip: float,
                 normaliser: float) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Σ_i min(1, C/‖g_i‖)·g_i / ``normaliser``, ‖g_i‖ the L2 norm of example i's
    gradient over all of its tensors jointly; and those norms (before clipping).

    With ``normaliser`` a constant (DP-SGD's expected batch size B, not the sample's
    size), adding or removing one example moves the result by at most C/B and replacing
    one by at most 2C/B."""
    squares = [g.flatten(1).double().square().sum(1) for g in grads.values()]
    norms = torch.stack(squares).sum(0).sqrt()
    scale = (clip / norms).clamp(max=1.0)  # a zero gradient: C/0 = inf → 1
    out = {}
    for name, g in grads.items():
        factor = scale.to(g.device, g.dtype).view(-1, *(1,) * (g.dim() - 1))
        out[name] = (g * factor).sum(0) / normaliser
    return out, norms


@storable(fields=("noise_multiplier", "sampling_rate", "steps", "_step_rdp"))
class PrivacyLedger:
    """The (ε, δ) a client has spent over its noised releases: ``RdpAccountant`` fed
    :attr:`event` once per release.

    ``noise_multiplier`` is z, the noise's std over the released sum's sensitivity;
    ``sampling_rate`` is q, each example's chance of being in a release's sample."""

    def __init__(self, noise_multiplier: float, sampling_rate: float) -> None:
        self.noise_multiplier = noise_multiplier
        self.sampling_rate = min(sampling_rate, 1.0)
        self.steps = 0
        self._step_rdp: np.ndarray | None = None  # one release's RDP at every order

    @classmethod
    def dp_sgd(cls, noise_std: float, clip: float, batch_size: int,
               shard_size: int) -> PrivacyLedger:
        """The ledger of DP-SGD as the module docstring describes it: noise of std
        ``noise_std`` on Σ clipped / B is std σ·B on the sum, whose add-or-remove
        sensitivity is C, so z = σ·B / C; q = B / |D| (at most 1)."""
        return cls(noise_std * batch_size / clip, batch_size / shard_size)

    @property
    def event(self) -> Any:
        """One release as dp-accounting's event: a Gaussian of multiplier z on a Poisson
        sample at rate q."""
        return release_event(self.noise_multiplier, self.sampling_rate)

    def spend(self, steps: int = 1) -> None:
        self.steps += steps

    def epsilon(self, delta: float) -> float:
        """ε at ``delta`` after the releases so far (0 before any; inf without noise):
        what ``RdpAccountant().compose(self.event, self.steps).get_epsilon(delta)``
        returns."""
        if self.steps == 0:
            return 0.0
        if self.noise_multiplier <= 0:
            return math.inf
        from dp_accounting.rdp import rdp_privacy_accountant as rdp

        if self._step_rdp is None:
            self._step_rdp = np.array(release_rdp(self.noise_multiplier, self.sampling_rate))
        # RDP composes additively — the accountant itself adds count × one event's RDP —
        # so one release's RDP serves every later call
        eps, _ = rdp.compute_epsilon(rdp.DEFAULT_RDP_ORDERS, self.steps * self._step_rdp,
                                     delta)
        return float(eps)


def release_event(noise_multiplier: float, sampling_rate: float) -> Any:
    """``PoissonSampledDpEvent(q, GaussianDpEvent(z))``: one DP-SGD release."""
    from dp_accounting import dp_event

    return dp_event.PoissonSampledDpEvent(sampling_rate,
                                          dp_event.GaussianDpEvent(noise_multiplier))


@functools.lru_cache(maxsize=256)
def release_rdp(noise_multiplier: float, sampling_rate: float) -> tuple[float, ...]:
    """One release's RDP at the accountant's default orders: ``RdpAccountant`` fed
    ``PoissonSampledDpEvent(q, GaussianDpEvent(z))`` once, read back (``_rdp`` is where
    it keeps it). The costly part of the accounting — 0.1–1 s for the 90-odd orders,
    the fractional ones summing slowly-converging series — so it is computed once per
    (z, q) in a process: every worker of an equal-sized shard shares it."""
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    one = rdp.RdpAccountant()
    # at small orders and a small q the accountant's series may not converge: it leaves
    # those orders out (ε then comes from the others, still a valid bound) and says so,
    # once per order, through absl's logger: quiet here, the figure is unchanged
    absl = logging.getLogger("absl")
    level = absl.level
    absl.setLevel(logging.ERROR)
    try:
        one.compose(release_event(noise_multiplier, sampling_rate))
    finally:
        absl.setLevel(level)
    return tuple(float(v) for v in one._rdp)
