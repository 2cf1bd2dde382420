"""SeedFlood: perfect consensus under full flooding, exactly-once delivery, the delay bound
of delayed flooding, exact wire bytes, subspace refresh, and learning against DZSGD."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from decent.models import params
from decent.platform.config import from_dict
from decent.platform.errors import ConfigError
from decent.platform.local_backend import LocalBackend
from decent.platform.runner import check, run
from decent.topologies import build_topology, diameter
from decent.zo import mezo
from tests.helpers import tiny


def flood_cfg(tmp_path, topology, rounds=1, **strategy):
    return from_dict(tiny(
        tmp_path, rounds=rounds, topology=topology,
        strategy={"name": "seedflood", "lr": 0.05, "eps": 1e-3, "batch_size": 16, "rank": 8,
                  "log_messages": True, **strategy},
        model={"name": "mlp", "hidden": [16]}, eval={"every": 0, "per_client": False},
    ))


def run_rounds(backend, rounds):
    for r in range(rounds):
        backend.run_round(r)
    return backend


TOPOLOGIES = [
    {"name": "ring", "n": 2}, {"name": "ring", "n": 9}, {"name": "meshgrid", "n": 12},
    {"name": "erdos_renyi", "n": 16, "p": 0.3, "seed": 3}, {"name": "ring", "n": 64},
]


@pytest.mark.parametrize("estimator", ["subcge", "mezo"])
@pytest.mark.parametrize("topology", TOPOLOGIES, ids=lambda t: f"{t['name']}{t['n']}")
def test_full_flooding_is_perfect_consensus(tmp_path, topology, estimator):
    cfg = flood_cfg(tmp_path, topology, estimator=estimator)
    backend = run_rounds(LocalBackend(cfg), 1)
    n = cfg.n
    vectors = backend.client_vectors()
    first = vectors[0]
    for vec in vectors.values():  # every replica, bit for bit
        np.testing.assert_array_equal(vec, first)
    for client in backend.group.clients.values():  # each update applied exactly once
        assert sorted((o, t) for o, t, _ in client.state["log"]) == [(o, 0) for o in range(n)]
    # ... and equal to applying all n updates centrally to the initial model
    central = LocalBackend(cfg)
    model = central.group.clients[0].model
    updates = sorted(backend.group.strategy.sent)
    assert len(updates) == n
    central.group.strategy.zo.apply(model, [(s, c) for s, c in updates])
    np.testing.assert_array_equal(central.group.strategy.state_vector(model), first)
    assert np.abs(first - central.group.strategy.state_vector(
        LocalBackend(cfg).group.clients[0].model)).max() > 0  # it did move


@pytest.mark.parametrize("hops", [1, 2, 3, 5])
def test_delayed_flooding_delivers_once_within_the_bound(tmp_path, hops):
    rounds = 8
    cfg = flood_cfg(tmp_path, {"name": "ring", "n": 11}, rounds=rounds, hops=hops)
    backend = run_rounds(LocalBackend(cfg), rounds)
    d = diameter(build_topology(cfg.topology).graph(0))
    bound = math.ceil(d / hops)
    for client in backend.group.clients.values():
        log = client.state["log"]
        keys = [(o, t) for o, t, _ in log]
        assert len(keys) == len(set(keys))  # never twice
        assert max(applied - t for _, t, applied in log) <= bound
        # everything sent early enough has arrived everywhere
        for t in range(rounds - bound):
            assert {o for o, s, _ in log if s == t} == set(range(cfg.n))
    if hops < d:  # and delay really happens
        assert max(a - t for c in backend.group.clients.values()
                   for _, t, a in c.state["log"]) >= 1


@pytest.mark.parametrize("topology", [{"name": "ring", "n": 8}, {"name": "meshgrid", "n": 12},
                                      {"name": "star", "n": 6}])
def test_bytes_per_edge_closed_form(tmp_path, topology):
    rounds = 3
    cfg = flood_cfg(tmp_path, topology, rounds=rounds)
    backend = LocalBackend(cfg)
    graph = build_topology(cfg.topology).graph(0)
    for r in range(rounds):
        _, traffic = backend.run_round(r)
        # every client forwards each of the n messages once to each neighbour: 12 B each
        assert traffic.edge_bytes == {(u, v): 12 * cfg.n for u, v in
                                      [*graph.edges, *((b, a) for a, b in graph.edges)]}
    assert backend.router.total_bytes == rounds * 12 * cfg.n * 2 * graph.number_of_edges()


def test_refresh_drains_and_folds(tmp_path):
    cfg = flood_cfg(tmp_path, {"name": "ring", "n": 8}, rounds=7, hops=1, refresh_every=3)
    backend = LocalBackend(cfg)
    strategy = backend.group.strategy
    assert len(strategy.phases(1)) == 1 + 1
    assert len(strategy.phases(2)) == 1 + 4  # drain: D = 4 hops before the refresh at t = 3
    u_before = strategy.zo.basis.U[0].clone()
    run_rounds(backend, 3)
    # after the drain every replica applied every update sent so far
    for client in backend.group.clients.values():
        assert len(client.state["log"]) == 3 * 8
    vectors = backend.client_vectors()
    for vec in vectors.values():
        np.testing.assert_allclose(vec, vectors[0], rtol=0, atol=1e-6)
    # the refresh at t = 3 folds U A Vᵀ into W and zeroes A: the model does not change
    clients = list(backend.group.clients.values())
    state, _ = clients[0].model._decent_subcge
    basis = strategy.zo.basis
    effective = clients[0].model[0].weight + basis.U[0] @ state.A[0] @ basis.V[0].T
    strategy.begin_phase(3, "compute", clients)
    assert all(float(c.model._decent_subcge[0].A.abs().max()) == 0 for c in clients)
    torch.testing.assert_close(clients[0].model[0].weight, effective, rtol=0, atol=1e-6)
    assert not torch.equal(basis.U[0], u_before)
    backend.run_round(3)  # and training goes on in the new subspace


def test_subcge_replicas_share_big_weights_not_buffers(tmp_path):
    backend = LocalBackend(flood_cfg(tmp_path, {"name": "ring", "n": 4}))
    clients = list(backend.group.clients.values())
    w = [c.model[0].weight.data_ptr() for c in clients]
    b = [c.model[0].bias.data_ptr() for c in clients]
    a = [c.model._decent_subcge[0].A.data_ptr() for c in clients]
    assert len(set(w)) == 1 and len(set(b)) == 4 and len(set(a)) == 4


def test_seedflood_learns_and_matches_dzsgd(tmp_path):
    rounds, n, lr = 40, 32, 0.1
    base = {"topology": {"name": "ring", "n": n}, "model": {"name": "mlp", "hidden": [16]},
            "eval": {"every": 1, "per_client": False}}
    flood = run(from_dict(tiny(tmp_path, rounds=rounds, **base, strategy={
        "name": "seedflood", "lr": lr, "batch_size": 16, "estimator": "mezo"}))).rows
    dz = run(from_dict(tiny(tmp_path, rounds=rounds, **base, strategy={
        "name": "dzsgd", "lr": lr, "batch_size": 16, "local_steps": 1}))).rows
    print(f"GMP test loss after 1 / {rounds} iterations on a ring of {n}: SeedFlood "
          f"{flood[0]['gmp_loss']:.4f} / {flood[-1]['gmp_loss']:.4f}, DZSGD "
          f"{dz[0]['gmp_loss']:.4f} / {dz[-1]['gmp_loss']:.4f}")
    assert flood[-1]["gmp_loss"] < flood[0]["gmp_loss"] - 0.1  # clearly better than start
    assert flood[-1]["gmp_loss"] <= dz[-1]["gmp_loss"] + 0.01  # at least matches DZSGD
    assert flood[-1]["consensus_distance"] == 0.0  # perfect consensus every iteration
    assert dz[-1]["consensus_distance"] > 0.0


def test_mezo_on_a_single_client(tmp_path):
    rows = run(from_dict(tiny(tmp_path, rounds=60, topology={"name": "complete", "n": 1},
                              strategy={"name": "mezo", "lr": 0.02, "batch_size": 16,
                                        "local_steps": 5},
                              model={"name": "mlp", "hidden": [16]},
                              eval={"every": 1, "per_client": False}))).rows
    assert rows[-1]["bytes_total"] == 0
    assert rows[-1]["gmp_loss"] < rows[0]["gmp_loss"] - 0.05


def test_seedflood_config_errors(tmp_path):
    with pytest.raises(ConfigError) as err:
        check(flood_cfg(tmp_path, {"name": "one_peer", "n": 8}))
    assert err.value.field == "topology.name"
    with pytest.raises(ConfigError) as err:
        check(flood_cfg(tmp_path, {"name": "ring", "n": 8}, hops=9))
    assert err.value.field == "strategy.hops"
    with pytest.raises(ConfigError) as err:
        flood_cfg(tmp_path, {"name": "ring", "n": 8}, estimator="adam")
    assert err.value.field == "strategy.estimator"


@pytest.mark.parametrize("estimator", ["subcge", "mezo"])
def test_local_equals_ray(tmp_path, ray_session, estimator):
    base = tiny(tmp_path, rounds=3, topology={"name": "ring", "n": 6},
                strategy={"name": "seedflood", "lr": 0.05, "rank": 8, "hops": 1,
                          "refresh_every": 2, "estimator": estimator},
                model={"name": "mlp", "hidden": [16]}, eval={"every": 1, "per_client": True})
    local = run(from_dict(base)).rows
    remote = run(from_dict({**base, "backend": "ray", "ray": {"clients_per_actor": 4}})).rows
    strip = [{k: v for k, v in r.items() if k != "wall_s"} for r in local]
    assert [{k: v for k, v in r.items() if k != "wall_s"} for r in remote] == strip


def test_shared_randomness_gossip_grows_with_t(tmp_path):
    """The §3.2 strawman: coefficient lists grow by n per iteration, and so do messages."""
    n, rounds = 6, 4
    cfg = from_dict(tiny(tmp_path, rounds=rounds, topology={"name": "ring", "n": n},
                         strategy={"name": "seed_gossip", "lr": 0.05, "batch_size": 16},
                         model={"name": "mlp", "hidden": [16]},
                         eval={"every": 0, "per_client": False}))
    backend = LocalBackend(cfg)
    per_round = []
    for r in range(rounds):
        _, traffic = backend.run_round(r)
        assert all(nbytes % 12 == 0 for nbytes in traffic.edge_bytes.values())  # 12 B/entry
        per_round.append(traffic.bytes)
    assert all(b > a for a, b in itertools.pairwise(per_round))
    assert per_round[0] == 12 * 2 * n  # round 0: each list holds only its own seed
    sizes = [len(c.state["coef"]) for c in backend.group.clients.values()]
    assert all(rounds < size <= n * rounds for size in sizes)
    client = backend.group.clients[0]
    # the model is exactly θ_0 − Σ c z rebuilt from its coefficient list
    rebuilt = LocalBackend(cfg).group.clients[0].model
    coefs = [(s, float(np.float32(c))) for s, c in sorted(client.state["coef"].items())]
    mezo.apply_updates(list(params.trainable_params(rebuilt).values()), coefs)
    np.testing.assert_array_equal(params.flat_vector(rebuilt), params.flat_vector(client.model))
