"""The Gaussian mechanism on a client's update, and the privacy it spends.

Each step a client clips its update (all tensors together) to L2 norm ``clip`` = C and adds
N(0, σ²) to every coordinate, with the noise scale DSO's report writes

    σ = C · sqrt(2 ln(1.25/δ)) / (ε · N)

(the classic Gaussian-mechanism calibration of Dwork & Roth, Thm A.1, for a quantity of
sensitivity C/N: the mean over N contributions each clipped to C). What a run really spends
is not read off that formula: :class:`PrivacyLedger` composes every noised release with the
Rényi-DP accountant of Google's ``dp-accounting`` (Mironov, 2017) and converts to (ε, δ).
The ledger takes the release's sensitivity as C (one client's clipped update, add/remove
adjacency), so its noise multiplier is σ / C, and the sampling probability of a step as
batch size / shard size (Poisson subsampling, the accountant's model of drawing a batch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from decent.core.schema import at_least, in_range, positive


@dataclass
class DPConfig:
    """``enabled``: clip and noise every update; ``population`` is N in σ (None: the
    number of workers)."""

    enabled: bool = False  # clip and noise every worker's update
    clip: float = positive(1.0)  # the L2 norm each update is clipped to (the sensitivity C)
    epsilon: float = positive(8.0)  # DSO's ε
    delta: float = in_range(1e-6, 0, 1, lo_open=True, hi_open=True)  # DSO's δ
    # N in the noise scale σ; None: the number of workers
    population: int | None = at_least(1, None, nullable=True)


def noise_std(clip: float, epsilon: float, delta: float, population: int) -> float:
    """σ = C·sqrt(2 ln(1.25/δ)) / (ε·N)."""
    return clip * math.sqrt(2 * math.log(1.25 / delta)) / (epsilon * population)


@torch.no_grad()
def clip_(tensors: dict[str, torch.Tensor], clip: float) -> float:
    """Scale ``tensors`` in place so that their joint L2 norm is at most ``clip``; the norm
    before clipping."""
    norm = math.sqrt(sum(float(t.double().square().sum()) for t in tensors.values()))
    if norm > clip:
        for t in tensors.values():
            t.mul_(clip / norm)
    return norm


@torch.no_grad()
def add_noise_(tensors: dict[str, torch.Tensor], std: float,
               generator: torch.Generator) -> None:
    """Add N(0, std²) to every coordinate, drawn on the CPU from ``generator`` in name
    order (the same noise on every device and backend)."""
    for name in sorted(tensors):
        t = tensors[name]
        z = torch.randn(t.shape, generator=generator, dtype=torch.float32)
        t.add_(z.to(t.device, t.dtype), alpha=std)


class PrivacyLedger:
    """The (ε, δ) a client has spent over its noised releases, by RDP composition."""

    def __init__(self, noise_multiplier: float, sampling_rate: float) -> None:
        self.noise_multiplier = noise_multiplier
        self.sampling_rate = min(sampling_rate, 1.0)
        self.steps = 0
        self._step_rdp: np.ndarray | None = None  # one release's RDP at every order

    def spend(self, steps: int = 1) -> None:
        self.steps += steps

    def epsilon(self, delta: float) -> float:
        """ε at ``delta`` after the releases so far (0 before any; inf without noise)."""
        if self.steps == 0:
            return 0.0
        if self.noise_multiplier <= 0:
            return math.inf
        from dp_accounting.rdp import rdp_privacy_accountant as rdp

        if self._step_rdp is None:
            # RDP composes additively, so one release's RDP (the costly part: ~0.1 s for
            # the accountant's 90-odd orders) serves every later call; this is the
            # accountant's own computation for its PoissonSampled(Gaussian) event
            self._step_rdp = np.asarray(rdp._compute_rdp_poisson_subsampled_gaussian(
                self.sampling_rate, self.noise_multiplier, rdp.DEFAULT_RDP_ORDERS))
        eps, _ = rdp.compute_epsilon(rdp.DEFAULT_RDP_ORDERS, self.steps * self._step_rdp,
                                     delta)
        return float(eps)
