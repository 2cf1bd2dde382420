"""DSGD: exact byte counts and equivalence with centralized mini-batch SGD."""

import copy

import numpy as np
import pytest
import torch

from decent.backends.local import local_engine
from decent.engine.config import from_dict
from decent.models import params
from decent.run.runner import run
from tests.helpers import tiny


def n_params(backend):
    return params.flat_vector(backend.group.base_model).size


@pytest.mark.parametrize(("n", "wire", "width"), [(5, "float32", 4), (8, "float32", 4),
                                                   (6, "bfloat16", 2)])
def test_ring_bytes_per_round_closed_form(tmp_path, n, wire, width):
    cfg = from_dict(tiny(tmp_path, topology={"name": "ring", "n": n}, strategy={
        "name": "dsgd", "local_steps": 1, "lr": 0.1, "wire_dtype": wire}))
    backend = local_engine(cfg)
    d = n_params(backend)
    for r in range(3):
        _, traffic = backend.run_round(r)
        assert traffic.bytes == 2 * n * width * d  # every client sends θ to its 2 neighbours
        assert traffic.max_edge_bytes == width * d
        assert len(traffic.edge_bytes) == 2 * n


def test_complete_graph_one_step_equals_centralized_sgd(tmp_path):
    n, batch, lr = 4, 8, 0.2
    cfg = from_dict(tiny(tmp_path, topology={"name": "complete", "n": n}, strategy={
        "name": "dsgd", "local_steps": 1, "batch_size": batch, "lr": lr}))
    backend = local_engine(cfg)
    group = backend.group
    # Replay the same batches (same per-client generators) on one central model.
    central = copy.deepcopy(group.base_model)
    gens = {cid: torch.Generator().set_state(c.generator.get_state())
            for cid, c in group.clients.items()}
    opt = torch.optim.SGD(central.parameters(), lr=lr)
    for r in range(3):
        backend.run_round(r)
        xs, ys = zip(*(group.clients[c].data.sample(batch, gens[c]) for c in range(n)),
                     strict=True)
        opt.zero_grad()
        group.task.loss(central, (torch.cat(xs), torch.cat(ys))).backward()
        opt.step()
        expected = params.flat_vector(central)
        for vec in backend.client_vectors().values():
            np.testing.assert_allclose(vec, expected, rtol=0, atol=2e-6)


def test_training_learns_and_mixing_sets_consensus(tmp_path):
    strategy = {"name": "dsgd", "local_steps": 5, "batch_size": 8, "lr": 0.3}
    ring = run(from_dict(tiny(tmp_path, rounds=15, topology={"name": "ring", "n": 8},
                              strategy=strategy, eval={"every": 5, "per_client": False}))).rows
    assert ring[-1]["loss"] < 0.5 * ring[0]["loss"]
    assert ring[-1]["gmp_accuracy"] > 0.7  # 10 classes: chance is 0.1
    assert ring[-1]["consensus_distance"] > 1e-6  # a ring only contracts disagreement
    complete = run(from_dict(tiny(tmp_path, rounds=2, topology={"name": "complete", "n": 8},
                                  strategy=strategy, eval={"every": 1, "per_client": False})))
    # Metropolis weights on a complete graph are all 1/n: one gossip step is exact averaging
    assert complete.rows[-1]["consensus_distance"] < 1e-10
