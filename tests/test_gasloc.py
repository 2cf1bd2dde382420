"""GASLoC: its special cases (DiLoCo/FedAvg, DSGD), acceleration, heterogeneous H_i,
random matchings."""

import numpy as np
import pytest

from decent.backends.local import local_engine
from decent.core.errors import ConfigError
from decent.engine.config import from_dict
from decent.models import params
from decent.run.runner import check
from tests.helpers import tiny

N = 4  # workers


def worker_vectors(backend, offset=0):
    return {cid - offset: vec for cid, vec in backend.client_vectors().items() if cid >= offset}


@pytest.mark.parametrize(("eta", "gasloc_extra"), [
    (1.0, {"edge_weights": "mixing", "gossip_step": 1.0}),  # λ = w_ij = 1/n, α = 1
    (0.7, {"edge_weights": "unit", "gossip_step": 1 / N}),  # λ = 1, α = 1/n
])
def test_complete_graph_is_diloco_with_sgd_outer_step(tmp_path, eta, gasloc_extra):
    """αλ = 1/n, γ = 0 on the complete graph: θ ← θ + η·mean(g), i.e. the server step of
    DiLoCo with outer SGD (lr η, no momentum); η = 1 is FedAvg."""
    inner = {"optimizer": "sgd", "lr": 0.1, "local_steps": 3, "batch_size": 8}
    fedavg = local_engine(from_dict(tiny(tmp_path, topology={"name": "star", "n": N + 1},
                                         strategy={"name": "fedavg", "outer_lr": eta, **inner})))
    gasloc = local_engine(from_dict(tiny(tmp_path, topology={"name": "complete", "n": N},
                                         strategy={"name": "gasloc", "outer_lr": eta,
                                                   "momentum": 0.0, **inner, **gasloc_extra})))
    # FedAvg's worker j+1 (vertex 0 is the server) and GASLoC's worker j: same shard, same RNG
    for j in range(N):
        mine, theirs = gasloc.group.clients[j], fedavg.group.clients[j + 1]
        mine.data = theirs.data
        mine.generator.set_state(theirs.generator.get_state())
    for r in range(4):
        fedavg.run_round(r)
        gasloc.run_round(r)
        ref = worker_vectors(fedavg, offset=1)
        for j, vec in worker_vectors(gasloc).items():
            np.testing.assert_allclose(vec, ref[j], rtol=0, atol=2e-6)
    assert np.abs(ref[0] - params.flat_vector(fedavg.group.base_model)).max() > 1e-3  # it moved


def test_one_inner_step_is_dsgd(tmp_path):
    inner = {"optimizer": "sgd", "lr": 0.1, "local_steps": 1, "batch_size": 8}
    dsgd = local_engine(from_dict(tiny(tmp_path, strategy={"name": "dsgd", **inner})))
    gasloc = local_engine(from_dict(tiny(tmp_path, strategy={
        "name": "gasloc", "outer_lr": 1.0, "gossip_step": 1.0, "momentum": 0.0, **inner})))
    for r in range(5):
        dsgd.run_round(r)
        gasloc.run_round(r)
    ref = dsgd.client_vectors()
    for cid, vec in gasloc.client_vectors().items():
        np.testing.assert_allclose(vec, ref[cid], rtol=0, atol=1e-6)
    assert np.abs(ref[0] - ref[3]).max() > 1e-4  # the ring has not reached consensus


def consensus_after(tmp_path, gamma, rounds):
    cfg = from_dict(tiny(
        tmp_path, rounds=rounds, topology={"name": "ring", "n": 16},
        strategy={"name": "gasloc", "optimizer": "sgd", "lr": 0.05, "local_steps": 5,
                  "batch_size": 8, "outer_momentum": gamma},
        task={"name": "linear_regression", "dim": 20, "samples_per_client": 32},
        model={"name": "mlp", "hidden": []},
    ))
    backend = local_engine(cfg)
    for r in range(rounds):
        backend.run_round(r)
    return backend.evaluate(per_client=False)


def test_accelerated_reaches_lower_consensus_distance_on_a_ring(tmp_path):
    """Realizable least squares (every f_i shares its minimiser): the disagreement decays to
    zero, at a rate set by the spectral gap — which momentum on the iterates improves."""
    plain = consensus_after(tmp_path, 0.0, 30)
    fast = consensus_after(tmp_path, 0.5, 30)
    print(f"\nring n=16, 30 outer steps: consensus distance γ=0 {plain['consensus_distance']:.3e}"
          f", γ=0.5 {fast['consensus_distance']:.3e}; test MSE {plain['gmp_loss']:.3e} vs "
          f"{fast['gmp_loss']:.3e}")
    assert fast["consensus_distance"] < 0.1 * plain["consensus_distance"]
    assert fast["gmp_loss"] < plain["gmp_loss"]


def test_heterogeneous_local_steps(tmp_path):
    listed = local_engine(from_dict(tiny(tmp_path, strategy={
        "name": "gasloc", "local_steps": 5, "local_steps_per_worker": [1, 2, 3, 4, 5, 6]})))
    drawn = local_engine(from_dict(tiny(tmp_path, topology={"name": "ring", "n": 12}, strategy={
        "name": "gasloc", "local_steps": 8, "local_steps_min": 2})))
    for backend in (listed, drawn):
        backend.run_round(0)
        backend.run_round(1)
    steps = {cid: c.state.H for cid, c in listed.group.clients.items()}
    assert steps == {i: i + 1 for i in range(6)}
    for cid, client in listed.group.clients.items():
        adam_steps = [s["step"] for s in client.state.optimizer.state.values()]
        assert all(int(s) == 2 * steps[cid] for s in adam_steps)  # two outer steps of H_i
    hs = [c.state.H for c in drawn.group.clients.values()]
    assert all(2 <= h <= 8 for h in hs) and len(set(hs)) > 2
    again = local_engine(from_dict(tiny(tmp_path, topology={"name": "ring", "n": 12}, strategy={
        "name": "gasloc", "local_steps": 8, "local_steps_min": 2})))
    assert [c.state.H for c in again.group.clients.values()] == hs  # fixed by the seed


@pytest.mark.parametrize(("topology", "most_peers"), [("one_peer", 1), ("two_peer", 2)])
def test_random_matchings_are_redrawn_each_outer_step(tmp_path, topology, most_peers):
    backend = local_engine(from_dict(tiny(tmp_path, topology={"name": topology, "n": 8},
                                          strategy={"name": "gasloc", "local_steps": 1})))
    d = params.flat_vector(backend.group.base_model).size
    edge_sets = []
    for r in range(4):
        _, traffic = backend.run_round(r)
        edges = set(traffic.edge_bytes)
        edge_sets.append(frozenset(edges))
        assert set(traffic.edge_bytes.values()) == {4 * d}  # full fp32 y per edge
        sent = {i: sum(1 for (s, _) in edges if s == i) for i in range(8)}
        assert 1 <= max(sent.values()) <= most_peers
        assert all((j, i) in edges for i, j in edges)
    assert len(set(edge_sets)) > 1


def test_local_steps_per_worker_needs_one_per_worker(tmp_path):
    cfg = from_dict(tiny(tmp_path, strategy={"name": "gasloc", "local_steps_per_worker": [1, 2]}))
    with pytest.raises(ConfigError) as err:
        check(cfg)
    assert err.value.field == "strategy.local_steps_per_worker"
    assert "6 values" in err.value.message
