"""FedAvg / outer-optimiser family on a star with the server at vertex 0."""

import copy

import numpy as np
import pytest
import torch

from decent.backends.local import local_engine
from decent.core.errors import ConfigError
from decent.engine.config import from_dict
from decent.models import params
from decent.run.runner import check
from tests.helpers import tiny


def star_cfg(tmp_path, name="fedavg", **strategy):
    return from_dict(tiny(tmp_path, topology={"name": "star", "n": 5},
                          strategy={"name": name, "batch_size": 8, "lr": 0.1, **strategy}))


@pytest.mark.parametrize("outer", [
    {"outer_lr": 1.0},
    {"outer_lr": 0.7, "outer_momentum": 0.9, "outer_nesterov": True},
])
def test_server_applies_outer_step_to_mean_delta(tmp_path, outer):
    cfg = star_cfg(tmp_path, local_steps=3, **outer)
    backend = local_engine(cfg)
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
            for _ in range(3):  # the worker's local SGD, written out
                batch = group.clients[c].data.sample(8, gens[c])
                opts[c].zero_grad(set_to_none=True)
                group.task.loss(model, batch).backward()
                opts[c].step()
            deltas.append({k: ref.get_parameter(k).detach() - v.detach()
                           for k, v in params.trainable_params(model).items()})
        for k, p in params.trainable_params(ref).items():
            p.grad = sum(d[k] for d in deltas) / len(deltas)
        outer_opt.step()
        expected = params.flat_vector(ref)
        for vec in backend.client_vectors().values():  # server and every worker hold θ
            np.testing.assert_allclose(vec, expected, rtol=0, atol=1e-6)


def test_bytes_up_and_down(tmp_path):
    backend = local_engine(star_cfg(tmp_path, local_steps=1))
    d = params.flat_vector(backend.group.base_model).size
    _, traffic = backend.run_round(0)
    assert traffic.edge_bytes == {**{(c, 0): 4 * d for c in range(1, 5)},
                                  **{(0, c): 4 * d for c in range(1, 5)}}


def test_server_holds_no_data(tmp_path):
    backend = local_engine(star_cfg(tmp_path))
    assert backend.group.clients[0].data is None
    assert all(backend.group.clients[c].data is not None for c in range(1, 5))


def test_fedavg_needs_a_star(tmp_path):
    cfg = from_dict(tiny(tmp_path, strategy={"name": "fedavg"}))
    with pytest.raises(ConfigError) as err:
        check(cfg)
    assert err.value.field == "topology.name"


def test_diloco_defaults_are_the_papers():
    from decent.strategies.diloco import DiLoCoConfig

    cfg = DiLoCoConfig()
    assert (cfg.optimizer, cfg.outer_lr, cfg.outer_momentum, cfg.outer_nesterov) == \
        ("adamw", 0.7, 0.9, True)


def test_diloco_is_fedavg_with_its_optimisers(tmp_path):
    """DiLoCo's defaults are the paper's optimisers (Douillard et al., 2023, §3): inner
    AdamW, lr 4e-4, weight decay 0.1; outer Nesterov SGD, lr 0.7, momentum 0.9. A DiLoCo
    config that names none of them runs exactly as FedAvg given them explicitly."""
    paper = {"optimizer": "adamw", "lr": 4e-4, "weight_decay": 0.1, "outer_lr": 0.7,
             "outer_momentum": 0.9, "outer_nesterov": True}
    shape = {"local_steps": 2, "batch_size": 8}
    diloco = local_engine(from_dict(tiny(tmp_path, topology={"name": "star", "n": 5},
                                         strategy={"name": "diloco", **shape})))
    fedavg = local_engine(from_dict(tiny(tmp_path, topology={"name": "star", "n": 5},
                                         strategy={"name": "fedavg", **shape, **paper})))
    plain = local_engine(from_dict(tiny(tmp_path, topology={"name": "star", "n": 5},
                                        strategy={"name": "fedavg", **shape})))
    outer = diloco.group.clients[0].state.outer.param_groups[0]
    assert (outer["lr"], outer["momentum"], outer["nesterov"]) == (0.7, 0.9, True)
    inner = diloco.group.clients[1].state.optimizer
    assert isinstance(inner, torch.optim.AdamW)
    assert (inner.param_groups[0]["lr"], inner.param_groups[0]["weight_decay"]) == (4e-4, 0.1)
    for r in range(3):
        for backend in (diloco, fedavg, plain):
            backend.run_round(r)
    for cid, vec in fedavg.client_vectors().items():
        np.testing.assert_array_equal(diloco.client_vectors()[cid], vec)
    # and FedAvg's own defaults (SGD inner, plain averaging) give another model
    assert np.abs(plain.client_vectors()[0] - fedavg.client_vectors()[0]).max() > 1e-4


def test_identity_with_error_feedback_changes_nothing(tmp_path):
    plain = local_engine(star_cfg(tmp_path, name="diloco", local_steps=2))
    fed = local_engine(star_cfg(tmp_path, name="diloco", local_steps=2,
                                compression={"name": "identity", "error_feedback": True}))
    for r in range(3):
        plain.run_round(r)
        fed.run_round(r)
    for cid, vec in plain.client_vectors().items():
        np.testing.assert_allclose(fed.client_vectors()[cid], vec, rtol=0, atol=1e-7)


def test_compressed_upload_bytes_and_feedback_memory(tmp_path):
    import math

    backend = local_engine(star_cfg(tmp_path, name="diloco", local_steps=2, compression={
        "name": "topk", "keep": 0.05, "error_feedback": True}))
    live = params.trainable_params(backend.group.base_model)
    d = sum(p.numel() for p in live.values())
    k = sum(max(1, math.ceil(0.05 * p.numel())) for p in live.values())
    _, traffic = backend.run_round(0)
    assert traffic.edge_bytes == {**{(c, 0): 8 * k for c in range(1, 5)},
                                  **{(0, c): 4 * d for c in range(1, 5)}}
    memory = backend.group.clients[1].state.feedback.memory
    assert set(memory) == set(live) and any(float(m.abs().max()) > 0 for m in memory.values())
