"""FedAvg / outer-optimiser family on a star with the server at vertex 0."""

import copy

import numpy as np
import pytest
import torch

from decent.models import params
from decent.platform.config import from_dict
from decent.platform.errors import ConfigError
from decent.platform.local_backend import LocalBackend
from decent.platform.runner import check
from decent.strategies.local_training import local_steps
from tests.helpers import tiny


def star_cfg(tmp_path, **strategy):
    return from_dict(tiny(tmp_path, topology={"name": "star", "n": 5},
                          strategy={"name": "fedavg", "batch_size": 8, "lr": 0.1, **strategy}))


@pytest.mark.parametrize("outer", [
    {"outer_lr": 1.0},
    {"outer_lr": 0.7, "outer_momentum": 0.9, "outer_nesterov": True},
])
def test_server_applies_outer_step_to_mean_delta(tmp_path, outer):
    cfg = star_cfg(tmp_path, local_steps=3, **outer)
    backend = LocalBackend(cfg)
    group = backend.group
    # Reference: replay each worker's local steps, average deltas, take the outer step.
    ref = copy.deepcopy(group.base_model)
    outer_opt = torch.optim.SGD(ref.parameters(), lr=cfg.strategy.outer_lr,
                                momentum=cfg.strategy.outer_momentum,
                                nesterov=cfg.strategy.outer_nesterov)
    workers = {c: copy.deepcopy(group.base_model) for c in range(1, 5)}
    opts = {c: torch.optim.SGD(m.parameters(), lr=0.1) for c, m in workers.items()}
    gens = {c: torch.Generator().set_state(group.clients[c].generator.get_state())
            for c in workers}
    for r in range(3):
        backend.run_round(r)
        deltas = []
        for c, model in workers.items():
            params.load(model, params.snapshot(ref))
            local_steps(model, opts[c], group.task, group.clients[c].data, gens[c], 3, 8)
            deltas.append({k: ref.get_parameter(k).detach() - v.detach()
                           for k, v in params.trainable_params(model).items()})
        for k, p in params.trainable_params(ref).items():
            p.grad = sum(d[k] for d in deltas) / len(deltas)
        outer_opt.step()
        expected = params.flat_vector(ref)
        for vec in backend.client_vectors().values():  # server and every worker hold θ
            np.testing.assert_allclose(vec, expected, rtol=0, atol=1e-6)


def test_bytes_up_and_down(tmp_path):
    backend = LocalBackend(star_cfg(tmp_path, local_steps=1))
    d = params.flat_vector(backend.group.base_model).size
    _, traffic = backend.run_round(0)
    assert traffic.edge_bytes == {**{(c, 0): 4 * d for c in range(1, 5)},
                                  **{(0, c): 4 * d for c in range(1, 5)}}


def test_server_holds_no_data(tmp_path):
    backend = LocalBackend(star_cfg(tmp_path))
    assert backend.group.clients[0].data is None
    assert all(backend.group.clients[c].data is not None for c in range(1, 5))


def test_fedavg_needs_a_star(tmp_path):
    cfg = from_dict(tiny(tmp_path, strategy={"name": "fedavg"}))
    with pytest.raises(ConfigError) as err:
        check(cfg)
    assert err.value.field == "topology.name"
