"""Client-level differential privacy for any method with local steps: the ``privacy``
section of a method's config, DP-SGD on every local step.

Each step a client draws a Poisson sample of its shard at rate q = min(1, B/|D|), clips
each example's gradient to L2 norm C jointly over its trainable tensors, sums them,
divides by B and adds N(0, (z·C/B)²) to every coordinate (:mod:`decent.privacy.gaussian`
describes the mechanism, why Poisson sampling, and the accountant's event): z =
``sigma`` is the noise multiplier, the noise's std over the clipped sum's sensitivity C.
A client's ε at ``delta`` is the RDP accountant's for the steps it has actually taken
(local steps × the rounds it trained in), one subsampled Gaussian each.

What a client sends is computed from its noised steps (its model, a pseudo-gradient, a
compressed difference, a push) and the run's public facts (its shard's size, the graph),
so its ε bounds all it sends: post-processing. What it does not bound: the training loss
each client reports to the run's own rows (the experimenter's record, not a message), and
a Byzantine client's data (it sends its attack).
"""

from __future__ import annotations

from dataclasses import dataclass

from decent.core.schema import in_range, one_of, positive

MECHANISMS = ("none", "dp_sgd")
# Poisson only: the sampling whose privacy the accountant bounds at the add-or-remove
# relation the clipping's sensitivity is stated for (decent.privacy.gaussian says why
# sampling with or without replacement is not)
SAMPLINGS = ("poisson",)


@dataclass
class PrivacyConfig:
    """``mechanism: dp_sgd`` makes every local step a DP-SGD step (none: ordinary steps)."""

    mechanism: str = one_of(MECHANISMS, "none")  # none, or dp_sgd on every local step
    clip: float = positive(1.0)  # C: each example's gradient clipped to this L2 norm
    # z, the noise multiplier: N(0, (z·C)²) on the clipped sum, (z·C/B)² on the step
    sigma: float = positive(1.0)
    sampling: str = one_of(SAMPLINGS, "poisson")  # how a step's examples are drawn
    delta: float = in_range(1e-5, 0, 1, lo_open=True, hi_open=True)  # the δ ε is given at

    @property
    def enabled(self) -> bool:
        return self.mechanism == "dp_sgd"
