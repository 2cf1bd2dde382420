"""DP-SGD's pieces: the noise scale as DSO's report writes it, per-example gradients
against per-example backward passes, per-example clipping (joint over all tensors, one
example's influence bounded where batch-mean clipping's is not), Poisson sampling, the
noise's distribution and reproducibility, and the privacy spent against the RDP bound of
the Gaussian mechanism computed here by hand and against dp-accounting's own accountant
fed the mechanism's event."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from decent.privacy.gaussian import PrivacyLedger, add_noise_, clipped_mean, noise_std
from decent.strategies import per_example
from decent.strategies.per_example import per_example_gradients
from decent.tasks.base import ClientData, Task


def test_noise_scale_is_the_reports_formula():
    # ε = 8, δ = 1e-6, C = 1, N = 16: sqrt(2 ln 1 250 000) / 128
    assert noise_std(1.0, 8.0, 1e-6, 16) == pytest.approx(5.2988025 / 128, rel=1e-6)
    assert noise_std(2.0, 4.0, 1e-5, 1) == pytest.approx(2 * math.sqrt(2 * math.log(1.25e5)) / 4)


def test_clipping_is_per_example_joint_over_all_tensors_and_keeps_the_direction():
    # example 0: norm 5 over both tensors → scaled to 1; example 1: norm 0.5, untouched
    grads = {"a": torch.tensor([[3.0, 0.0], [0.3, 0.0]]),
             "b": torch.tensor([[[0.0, 4.0]], [[0.0, 0.4]]])}
    mean, norms = clipped_mean(grads, 1.0, 4.0)  # divided by B = 4, not by the 2 examples
    np.testing.assert_allclose(norms.numpy(), [5.0, 0.5], rtol=1e-6)
    np.testing.assert_allclose(mean["a"].numpy(), [(0.6 + 0.3) / 4, 0.0], rtol=1e-6)
    np.testing.assert_allclose(mean["b"].numpy(), [[0.0, (0.8 + 0.4) / 4]], rtol=1e-6)
    zero, norms = clipped_mean({"a": torch.zeros(3, 2)}, 1.0, 4.0)  # no 0/0
    assert torch.equal(zero["a"], torch.zeros(2)) and torch.equal(norms, torch.zeros(3))


class Regression(Task):
    """y ≈ f(x) under the squared error, the mean over a batch's examples."""

    name = "regression"

    def model_spec(self):
        return {}

    def client_data(self, holders, device):
        return {}

    def loss(self, model, batch):
        x, y = batch
        return F.mse_loss(model(x).squeeze(-1), y)

    def evaluate(self, model, device):
        return {}


def small_model_and_batch(size=8):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 6), torch.nn.Tanh(), torch.nn.Linear(6, 1))
    x, y = torch.randn(size, 5), torch.randn(size)
    return model, (x, y)


def backward_per_example(model, task, batch):
    """The reference: one backward pass per example, on a batch of that example alone."""
    live = dict(model.named_parameters())
    rows = []
    for i in range(batch[0].shape[0]):
        loss = task.loss(model, tuple(t[i: i + 1] for t in batch))
        rows.append(dict(zip(live, torch.autograd.grad(loss, list(live.values())),
                             strict=True)))
    return {n: torch.stack([r[n] for r in rows]) for n in live}


@pytest.mark.parametrize("path", ["vmap", "loop"])
def test_per_example_gradients_are_per_example_backward_passes(monkeypatch, path):
    model, batch = small_model_and_batch()
    task = Regression()
    if path == "loop":  # the fallback for a model vmap cannot trace
        monkeypatch.setattr(per_example, "vmap_problem", lambda model: "refused here")
    losses, grads = per_example_gradients(model, task, batch)
    reference = backward_per_example(model, task, batch)
    assert set(grads) == set(reference)
    for name, g in grads.items():
        torch.testing.assert_close(g, reference[name], rtol=1e-5, atol=1e-7)
    with torch.no_grad():
        expected = (model(batch[0]).squeeze(-1) - batch[1]) ** 2
    torch.testing.assert_close(losses, expected, rtol=1e-5, atol=1e-7)
    # the task's loss is a mean over its examples: unclipped, they average to its gradient
    whole = torch.autograd.grad(task.loss(model, batch), list(model.parameters()))
    for g, name in zip(whole, grads, strict=True):
        torch.testing.assert_close(grads[name].mean(0), g, rtol=1e-5, atol=1e-7)
    assert all(p.grad is None for p in model.parameters())  # .grad left alone


def test_vmap_problem_names_what_a_loop_is_needed_for():
    assert per_example.vmap_problem(small_model_and_batch()[0]) is None
    drop = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.1))
    assert "dropout" in per_example.vmap_problem(drop)
    assert "running statistics" in per_example.vmap_problem(torch.nn.BatchNorm1d(2))


def old_batch_mean_clip(model, task, batch, clip):
    """What honest DSO workers sent before per-example clipping: the batch's mean
    gradient, clipped as a whole to ``clip``."""
    grads = torch.autograd.grad(task.loss(model, batch), list(model.parameters()))
    norm = math.sqrt(sum(float(g.double().square().sum()) for g in grads))
    return torch.cat([g.reshape(-1) for g in grads]) * min(1.0, clip / norm)


def pre_noise_update(model, task, batch, clip, batch_size):
    _, grads = per_example_gradients(model, task, batch)
    update, _ = clipped_mean(grads, clip, batch_size)
    return torch.cat([update[n].reshape(-1) for n, _ in model.named_parameters()])


def test_one_huge_example_moves_the_update_by_at_most_2c_over_b():
    model, (x, y) = small_model_and_batch(8)
    task, C, B = Regression(), 0.5, 8
    huge = y.clone()
    huge[3] = 1000 * (y[3] + 1)  # its residual, and so its gradient, is ~1000× the others'
    base = pre_noise_update(model, task, (x, y), C, B)
    moved = pre_noise_update(model, task, (x, huge), C, B)
    assert float((moved - base).norm()) <= 2 * C / B * (1 + 1e-6)  # replace-one: 2C/B
    dropped = pre_noise_update(model, task, (x[[0, 1, 2, 4, 5, 6, 7]], y[[0, 1, 2, 4, 5, 6, 7]]),
                               C, B)
    assert float((dropped - base).norm()) <= C / B * (1 + 1e-6)  # add/remove: C/B
    # batch-mean clipping lets that one example take the whole clipped update over
    old = old_batch_mean_clip(model, task, (x, y), C)
    old_moved = old_batch_mean_clip(model, task, (x, huge), C)
    assert float((old_moved - old).norm()) > 4 * (2 * C / B)


def test_poisson_sampling_is_each_example_at_rate_q_from_the_given_generator():
    data = ClientData(torch.arange(4000.0).unsqueeze(1), torch.arange(4000))
    one = data.poisson_sample(0.05, torch.Generator().manual_seed(3))
    again = data.poisson_sample(0.05, torch.Generator().manual_seed(3))
    assert torch.equal(one[1], again[1])  # reproducible from the client's generator
    assert torch.equal(one[0].squeeze(1).long(), one[1])  # rows kept together, in order
    assert bool((one[1][1:] > one[1][:-1]).all())  # each example at most once
    # Binomial(4000, 0.05): mean 200, sd 13.8
    sizes = [len(data.poisson_sample(0.05, torch.Generator().manual_seed(s))[1])
             for s in range(20)]
    assert abs(np.mean(sizes) - 200) < 4 * 13.8 / math.sqrt(20)
    assert len(data.poisson_sample(0.0, torch.Generator())[1]) == 0
    assert len(data.poisson_sample(1.0, torch.Generator())[1]) == 4000


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


def test_the_dp_sgd_ledger_is_the_accountant_fed_the_mechanisms_event():
    # DSO's defaults for 10 workers (σ = C·sqrt(2 ln(1.25/δ))/(ε·N)), B = 16, a shard of
    # 160: noise of std σ on Σ clipped / B is std σ·B on a sum of sensitivity C
    from dp_accounting import dp_event, rdp
    from dp_accounting.privacy_accountant import NeighboringRelation

    sigma, C, B, shard, steps, delta = noise_std(1.0, 8.0, 1e-6, 10), 1.0, 16, 160, 50, 1e-6
    ledger = PrivacyLedger.dp_sgd(sigma, C, B, shard)
    ledger.spend(steps)
    accountant = rdp.RdpAccountant()  # add-or-remove-one: the relation clipping bounds
    assert accountant.neighboring_relation is NeighboringRelation.ADD_OR_REMOVE_ONE
    event = dp_event.PoissonSampledDpEvent(B / shard, dp_event.GaussianDpEvent(sigma * B / C))
    assert ledger.event == event
    accountant.compose(event, steps)
    assert ledger.epsilon(delta) == pytest.approx(accountant.get_epsilon(delta), rel=1e-12)
