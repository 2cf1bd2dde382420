"""Client-level DP for any method with local steps (``strategy.privacy``): one step equals
DP-SGD written out by hand (a Poisson sample, each example's gradient by its own backward
pass, clipped, summed over B, noise from the client's generator), each client's ε equals
dp-accounting's RDP accountant for the steps it took, every first-order method runs it,
batched ≡ sequential ≡ Ray, a resumed run goes on spending, and what cannot be bounded is
refused in one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant as rdp

from decent.core.errors import ConfigError
from decent.engine.config import from_dict
from decent.run.runner import run
from decent.strategies.local_training import local_steps
from decent.strategies.private_steps import private_client_steps
from decent.strategies.step_batching import StepRequest
from tests.helpers import (
    assert_ray_equals_local,
    assert_resumed_equals_full,
    rows_and_vectors,
    tiny,
)
from tests.test_batched import group_after

PRIVATE = {"mechanism": "dp_sgd", "clip": 0.5, "sigma": 1.1, "delta": 1e-5}


def dp_config(tmp_path, strategy: dict | None = None, topology: dict | None = None,
              **sections):
    strategy = strategy or {"name": "dsgd", "local_steps": 2, "lr": 0.1}
    return tiny(tmp_path, rounds=3, topology=topology or {"name": "ring", "n": 6},
                strategy={**strategy, "batch_size": 8, "privacy": PRIVATE}, **sections)


def test_one_step_is_dp_sgd_written_out(tmp_path):
    group = group_after(from_dict(dp_config(tmp_path)), 0)
    client = group.clients[2]
    model, data = client.model, client.data
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    state = client.generator.get_state()
    # by hand, from the same generator
    g = torch.Generator()
    g.set_state(state)
    q = 8 / len(data)
    keep = torch.rand(len(data), generator=g, dtype=torch.float64) < q
    idx = keep.nonzero().squeeze(1)
    total = {n: torch.zeros_like(p) for n, p in before.items()}
    for i in idx.tolist():
        model.zero_grad()
        loss = client.task.loss(model, (data.x[i: i + 1], data.y[i: i + 1]))
        loss.backward()
        grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
        norm = torch.sqrt(sum(v.double().square().sum() for v in grads.values()))
        scale = min(1.0, 0.5 / float(norm))
        for n in total:
            total[n] += grads[n] * scale
    std = 1.1 * 0.5 / 8
    expected = {}
    for n in sorted(total):
        noise = torch.randn(total[n].shape, generator=g, dtype=torch.float32)
        expected[n] = before[n] - 0.1 * (total[n] / 8 + std * noise)
    model.zero_grad(set_to_none=True)
    client.generator.set_state(state)
    private_client_steps(StepRequest(client, client.state.optimizer, client.task, 1, 8,
                                     group.strategy.cfg, 0))
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.detach(), expected[n], rtol=0, atol=1e-6)
    assert client.private_steps == 1


def reference_epsilon(q: float, z: float, steps: int, delta: float) -> float:
    accountant = rdp.RdpAccountant()
    accountant.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(z)), steps)
    return accountant.get_epsilon(delta)


def test_each_clients_epsilon_is_the_accountants_for_the_steps_it_took(tmp_path):
    group = group_after(from_dict(dp_config(tmp_path)), 3)  # 3 rounds × 2 local steps
    for client in group.clients.values():
        assert client.private_steps == 6
        expected = reference_epsilon(min(1.0, 8 / len(client.data)), 1.1, 6, 1e-5)
        assert client.stats["dp_epsilon"].value == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(("strategy", "topology"), [
    ({"name": "fedavg", "local_steps": 2, "lr": 0.1}, {"name": "star", "n": 6}),
    ({"name": "diloco", "local_steps": 2}, {"name": "star", "n": 6}),
    ({"name": "gasloc", "local_steps": 2, "lr": 0.05, "optimizer": "sgd"}, None),
    ({"name": "choco", "local_steps": 2, "lr": 0.1}, None),
    ({"name": "sgp", "local_steps": 2, "lr": 0.1}, {"name": "directed_exponential", "n": 6}),
    ({"name": "combo", "local_steps": 2, "lr": 0.1, "segments": 2, "replicas": 1}, None),
], ids=lambda v: v["name"] if isinstance(v, dict) and "local_steps" in v else "")
def test_every_method_with_local_steps_reports_its_epsilon(tmp_path, strategy, topology):
    cfg = from_dict(dp_config(tmp_path, strategy, topology))
    result = run(cfg)
    # the largest over the clients that trained (3 rounds × 2 steps): the smallest shard
    # spends the most
    shards = group_after(cfg, 0).clients
    trained = [c for c in shards.values() if c.data is not None]
    expected = max(reference_epsilon(min(1.0, 8 / len(c.data)), 1.1, 6, 1e-5) for c in trained)
    assert result.summary["dp_epsilon"] == pytest.approx(expected, rel=1e-9)


def test_batched_and_ray_runs_equal_the_sequential_one(tmp_path, ray_session):
    seq = dp_config(tmp_path, execution={"mode": "sequential"})
    rows, vectors = rows_and_vectors(from_dict(seq))
    bat_rows, bat_vectors = rows_and_vectors(from_dict({**seq, "execution": {"mode":
                                                                             "batched"}}))
    # each client's DP steps run alone in both modes; the gossip mix is stacked in batched
    # mode and sums in another order (batched mode's tolerance)
    for a, b in zip(rows, bat_rows, strict=True):
        for key, value in a.items():
            assert b[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    for cid, vec in vectors.items():
        np.testing.assert_allclose(bat_vectors[cid], vec, rtol=0, atol=1e-6)
    assert_ray_equals_local(seq, 4)


def test_a_resumed_private_run_goes_on_spending(tmp_path):
    assert_resumed_equals_full(from_dict(dp_config(tmp_path, checkpoint={"every": 2})))


def test_what_dp_sgd_cannot_bound_is_refused_in_one_line(tmp_path):
    raw = dp_config(tmp_path)
    raw["strategy"]["grad_clip"] = 1.0
    with pytest.raises(ConfigError) as err:
        from_dict(raw)
    assert err.value.field == "strategy.grad_clip" and "privacy.clip" in str(err.value)
    raw["strategy"]["grad_clip"] = 0.0
    raw["strategy"]["privacy"] = {**PRIVATE, "sampling": "shuffle"}
    with pytest.raises(ConfigError) as err:
        from_dict(raw)
    assert err.value.field == "strategy.privacy.sampling"
    # a batch norm mixes the examples of a batch: no per-example bound
    group = group_after(from_dict(dp_config(tmp_path)), 0)
    client = group.clients[0]
    client.model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 8),
                                       torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 10))
    optimizer = torch.optim.SGD(client.model.parameters(), lr=0.1)
    with pytest.raises(ConfigError) as err:
        local_steps(client, optimizer, client.task, 1, 8, group.strategy.cfg)
    assert err.value.field == "strategy.privacy.mechanism" and "running statistics" in str(
        err.value)


def test_the_summary_says_a_byzantine_clients_data_is_not_covered(tmp_path):
    result = run(from_dict(dp_config(tmp_path, faults={"byzantine": [1],
                                                       "attack": {"name": "sign_flip"}})))
    assert "Byzantine clients [1]" in result.summary["dp_epsilon_note"]
