"""The Gaussian mechanism's pieces: the noise scale as DSO's report writes it, joint
clipping, the noise's distribution and reproducibility, and the privacy spent against the
RDP bound of the Gaussian mechanism computed here by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from decent.privacy.gaussian import PrivacyLedger, add_noise_, clip_, noise_std


def test_noise_scale_is_the_reports_formula():
    # ε = 8, δ = 1e-6, C = 1, N = 16: sqrt(2 ln 1 250 000) / 128
    assert noise_std(1.0, 8.0, 1e-6, 16) == pytest.approx(5.2988025 / 128, rel=1e-6)
    assert noise_std(2.0, 4.0, 1e-5, 1) == pytest.approx(2 * math.sqrt(2 * math.log(1.25e5)) / 4)


def test_clipping_is_joint_over_all_tensors_and_keeps_the_direction():
    tensors = {"a": torch.tensor([3.0, 0.0]), "b": torch.tensor([[0.0, 4.0]])}  # norm 5
    assert clip_(tensors, 1.0) == pytest.approx(5.0)
    np.testing.assert_allclose(tensors["a"].numpy(), [0.6, 0.0], rtol=1e-6)
    np.testing.assert_allclose(tensors["b"].numpy(), [[0.0, 0.8]], rtol=1e-6)
    small = {"a": torch.tensor([0.3, 0.4])}
    assert clip_(small, 1.0) == pytest.approx(0.5)
    assert torch.equal(small["a"], torch.tensor([0.3, 0.4]))  # under the bound: untouched


def test_noise_has_the_asked_std_and_is_reproducible():
    tensors = {"w": torch.zeros(200_000)}
    add_noise_(tensors, 0.5, torch.Generator().manual_seed(0))
    assert float(tensors["w"].std()) == pytest.approx(0.5, rel=0.01)
    assert abs(float(tensors["w"].mean())) < 0.005
    one = {"x": torch.zeros(5), "y": torch.zeros(3)}
    other = {"y": torch.zeros(3), "x": torch.zeros(5)}  # insertion order does not matter
    add_noise_(one, 1.0, torch.Generator().manual_seed(7))
    add_noise_(other, 1.0, torch.Generator().manual_seed(7))
    assert torch.equal(one["x"], other["x"]) and torch.equal(one["y"], other["y"])


def basic_rdp_epsilon(z: float, steps: int, delta: float) -> float:
    """Mironov (2017), Prop. 3: ε = min_α T·α/(2z²) + ln(1/δ)/(α − 1) for the Gaussian
    mechanism without subsampling."""
    orders = np.concatenate([np.linspace(1.01, 10, 900), np.arange(11, 512)])
    return float(np.min(steps * orders / (2 * z * z) + math.log(1 / delta) / (orders - 1)))


@pytest.mark.parametrize(("z", "steps"), [(1.0, 1), (2.0, 100), (5.0, 1000)])
def test_spent_privacy_is_within_the_gaussian_rdp_bound(z, steps):
    ledger = PrivacyLedger(z, 1.0)
    assert ledger.epsilon(1e-6) == 0.0
    ledger.spend(steps)
    eps, basic = ledger.epsilon(1e-6), basic_rdp_epsilon(z, steps, 1e-6)
    # the accountant's conversion (Canonne et al. 2020) is tighter than the basic one,
    # by less than the ln-terms it adds
    assert 0.75 * basic < eps <= basic * (1 + 1e-6)


def test_more_steps_spend_more_and_sampling_or_noise_spends_less():
    def spent(z, q, steps):
        ledger = PrivacyLedger(z, q)
        ledger.spend(steps)
        return ledger.epsilon(1e-5)

    assert spent(1.1, 0.01, 1000) < spent(1.1, 0.01, 4000)
    assert spent(1.1, 0.01, 1000) < spent(1.1, 1.0, 1000)
    assert spent(2.0, 0.01, 1000) < spent(1.1, 0.01, 1000)
    assert spent(0.0, 0.01, 10) == math.inf


@pytest.mark.parametrize(("z", "q", "steps"), [(1.1, 0.01, 1000), (0.05, 0.1, 37), (2.0, 1.0, 5)])
def test_the_ledger_is_the_accountants_own_composition(z, q, steps):
    from dp_accounting import dp_event, rdp

    accountant = rdp.RdpAccountant()
    event = dp_event.GaussianDpEvent(z)
    accountant.compose(event if q == 1.0 else dp_event.PoissonSampledDpEvent(q, event), steps)
    ledger = PrivacyLedger(z, q)
    for _ in range(2):  # the cached one-release RDP gives the same answer again
        ledger.steps = steps
        assert ledger.epsilon(1e-6) == pytest.approx(accountant.get_epsilon(1e-6), rel=1e-12)
