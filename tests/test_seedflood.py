"""SeedFlood: perfect consensus under full flooding, exactly-once delivery, the delay bound
of delayed flooding, exact wire bytes, subspace refresh, and learning against DZSGD."""

from __future__ import annotations

import itertools
import math

import networkx as nx
import numpy as np
import pytest
import torch

from decent.backends.local import local_engine
from decent.core.errors import ConfigError
from decent.engine.config import from_dict
from decent.models import params
from decent.run.runner import check, run
from decent.strategies.base import PhaseContext
from decent.topologies import build_topology
from decent.zo import mezo
from tests.helpers import tiny

# the flooding tests hold in both execution modes: batched only changes how the ±ε
# evaluations are computed (decent.engine.stacked_zo), never what is sent or applied
MODES = ("sequential", "batched")


def flood_cfg(tmp_path, topology, rounds=1, mode="sequential", **strategy):
    return from_dict(tiny(
        tmp_path, rounds=rounds, topology=topology,
        strategy={"name": "seedflood", "lr": 0.05, "eps": 1e-3, "batch_size": 16, "rank": 8,
                  "log_messages": True, **strategy},
        model={"name": "mlp", "hidden": [16]}, eval={"every": 0, "per_client": False},
        execution={"mode": mode},
    ))


def run_rounds(backend, rounds):
    for r in range(rounds):
        backend.run_round(r)
    return backend


TOPOLOGIES = [
    {"name": "complete", "n": 2}, {"name": "ring", "n": 9}, {"name": "meshgrid", "n": 12},
    {"name": "erdos_renyi", "n": 16, "p": 0.3, "seed": 3}, {"name": "ring", "n": 64},
]


def sent_updates(backend):
    """Every (seed, coefficient) the clients made, sorted by seed."""
    return sorted(u for c in backend.group.clients.values() for u in c.state.sent)


# batched on the middle-sized graphs only (two clients and ring64 add time, not coverage)
CONSENSUS = [(t, e, m) for m in MODES for t in (TOPOLOGIES if m == "sequential"
                                                else TOPOLOGIES[1:4])
             for e in ("subcge", "mezo")]


@pytest.mark.parametrize(("topology", "estimator", "mode"), CONSENSUS,
                         ids=lambda x: f"{x['name']}{x['n']}" if isinstance(x, dict) else x)
def test_full_flooding_is_perfect_consensus(tmp_path, topology, estimator, mode):
    cfg = flood_cfg(tmp_path, topology, mode=mode, estimator=estimator)
    backend = run_rounds(local_engine(cfg), 1)
    assert (backend.group.batcher is not None) == (mode == "batched")
    n = cfg.n
    vectors = backend.client_vectors()
    first = vectors[0]
    for vec in vectors.values():  # every replica, bit for bit
        np.testing.assert_array_equal(vec, first)
    for client in backend.group.clients.values():  # each update applied exactly once
        assert sorted((o, t) for o, t, _ in client.state.log) == [(o, 0) for o in range(n)]
    # ... and equal to applying all n updates centrally to the initial model
    central = local_engine(cfg)
    updates = sent_updates(backend)
    assert len(updates) == n
    replica = central.group.clients[0].state.replica
    central.group.shared.estimator.apply(replica, updates)
    np.testing.assert_array_equal(replica.vector(), first)
    untouched = local_engine(cfg).group.clients[0].state.replica.vector()
    assert np.abs(first - untouched).max() > 0  # it did move


def distances(cfg):
    return dict(nx.all_pairs_shortest_path_length(build_topology(cfg.topology).graph(0)))


def expected_delay(d: int, k: int) -> int:
    """§4.5: with k sends per iteration an update reaches hop distance d during iteration
    t + ⌈d/k⌉ − 1 and is applied at its end (its maker applies it at once)."""
    return max(0, math.ceil(d / k) - 1)


SCHEDULES = [(topo, k) for topo, diam in ((("path", 7), 6), (("ring", 9), 4))
             for k in sorted({1, 2, 3, diam})]
# every k of the ring batched too (the schedule is the mode's business nowhere)
SCHEDULE_MODES = [(*s, m) for m in MODES for s in SCHEDULES
                  if m == "sequential" or s[0][0] == "ring"]


@pytest.mark.parametrize(("topology", "k", "mode"), SCHEDULE_MODES, ids=lambda x: str(x))
def test_delayed_flooding_applies_each_update_at_the_exact_iteration(tmp_path, topology, k,
                                                                     mode):
    name, n = topology
    rounds = 7
    cfg = flood_cfg(tmp_path, {"name": name, "n": n}, rounds=rounds, mode=mode, hops=k)
    backend = local_engine(cfg)
    assert backend.group.strategy.phases(0) == ("compute", *["forward"] * (k - 1), "apply")
    run_rounds(backend, rounds)
    dist = distances(cfg)
    for u, client in backend.group.clients.items():
        applied = {(o, t): a for o, t, a in client.state.log}
        assert len(applied) == len(client.state.log)  # never twice
        expected = {(o, t): t + expected_delay(dist[o][u], k)
                    for o in range(n) for t in range(rounds)
                    if t + expected_delay(dist[o][u], k) < rounds}
        assert applied == expected


@pytest.mark.parametrize(("topology", "k", "mode"), SCHEDULE_MODES, ids=lambda x: str(x))
def test_bytes_per_directed_edge_match_the_closed_form(tmp_path, topology, k, mode):
    """In iteration r client u sends to each neighbour the 12-byte message of every origin
    o with d(o, u) < D (at distance D nobody is left to reach) whose update of iteration
    r − ⌊d(o, u)/k⌋ exists: 12·|{o : d(o, u) < D, ⌊d(o, u)/k⌋ ≤ r}| bytes."""
    name, n = topology
    rounds = 7
    cfg = flood_cfg(tmp_path, {"name": name, "n": n}, rounds=rounds, mode=mode, hops=k)
    backend = local_engine(cfg)
    graph = build_topology(cfg.topology).graph(0)
    dist = distances(cfg)
    diam = max(max(row.values()) for row in dist.values())
    total = 0
    for r in range(rounds):
        _, traffic = backend.run_round(r)
        expected = {(u, v): 12 * sum(1 for o in range(n) if dist[o][u] < diam
                                     and dist[o][u] // k <= r)
                    for u in graph for v in graph[u]}
        assert traffic.edge_bytes == expected
        total += sum(expected.values())
    assert backend.router.total_bytes == total


@pytest.mark.parametrize(("topology", "mode"), [
    *(({"name": "ring", "n": 8}, m) for m in MODES), ({"name": "meshgrid", "n": 12}, MODES[0]),
    *(({"name": "star", "n": 6}, m) for m in MODES)],
    ids=lambda x: f"{x['name']}{x['n']}" if isinstance(x, dict) else x)
def test_full_flooding_bytes_per_edge(tmp_path, topology, mode):
    """k = D: from the first iteration on, u sends 12 B per origin closer than D."""
    cfg = flood_cfg(tmp_path, topology, rounds=2, mode=mode)
    backend = local_engine(cfg)
    graph = build_topology(cfg.topology).graph(0)
    dist = distances(cfg)
    diam = max(max(row.values()) for row in dist.values())
    for r in range(2):
        _, traffic = backend.run_round(r)
        assert traffic.edge_bytes == {
            (u, v): 12 * sum(1 for o in graph if dist[o][u] < diam)
            for u in graph for v in graph[u]}
    # a star's leaves are at distance 2 = D from each other: a leaf sends its own update
    # and (flooding forwards to every neighbour) the hub's back; the hub forwards all 6
    if topology["name"] == "star":
        assert traffic.edge_bytes[(1, 0)] == 24 and traffic.edge_bytes[(0, 1)] == 12 * 6


@pytest.mark.parametrize("k", [0, 2])
def test_a_send_is_one_message_a_neighbour_counted_per_update(tmp_path, k):
    """What a client sends one neighbour at one send is one message bundling its updates:
    12 bytes each, and the round's message figure counts the updates, as if each went
    alone (n updates an iteration cross every edge: per-update objects would be n²)."""
    cfg = flood_cfg(tmp_path, {"name": "random_regular", "n": 16, "degree": 3, "seed": 1},
                    rounds=3, hops=k)
    backend = local_engine(cfg)
    posted = backend.record_messages()
    for r in range(3):
        before = len(posted)
        _, traffic = backend.run_round(r)
        sent = posted[before:]
        edges = [(m.sent_phase, m.src, m.dst) for m in sent]
        assert len(edges) == len(set(edges))  # one message per (phase, edge)
        assert all(m.nbytes == 12 * m.items == 12 * len(m.payload[0]) for m in sent)
        assert traffic.messages == sum(m.items for m in sent) == traffic.bytes // 12
        assert len(sent) <= 16 * 3 * len(backend.strategy.phases(r))


def test_the_memory_plan_holds_what_flooding_holds(tmp_path, monkeypatch):
    """The memory plan's in-round figure of a client (``traffic_bytes``) is what its state
    holds at its peak: under full flooding, by the apply phase, every update of the
    iteration (36 bytes with its header) and the seeds seen (8 bytes) of this iteration
    and the last — n of each, 2n seeds."""
    from decent.strategies.seedflood import FIELDS, SeedFlood

    n = 24
    cfg = flood_cfg(tmp_path, {"name": "random_regular", "n": n, "degree": 3, "seed": 2},
                    rounds=2)
    backend = local_engine(cfg)
    peak = {}
    see = SeedFlood.see

    def measured(state, arrived):
        fresh = see(state, arrived)
        held = sum(a.nbytes for a in state.seen.values()) + sum(
            getattr(q, f).nbytes for q in [*state.queue, *state.carry] for f in FIELDS)
        peak[id(state)] = max(peak.get(id(state), 0), held)
        return fresh

    monkeypatch.setattr(SeedFlood, "see", staticmethod(measured))
    run_rounds(backend, 2)
    graph = build_topology(cfg.topology).graph(0)
    states = {cid: c.state for cid, c in backend.group.clients.items()}
    for cid, state in states.items():
        grows, sends = backend.strategy.traffic_bytes(cid, graph.degree(cid), 0)
        assert peak[id(state)] == grows == n * (36 + 2 * 8)
        assert sends == 3 * n * 36


@pytest.mark.parametrize(("k", "mode"), [(1, MODES[0]), (2, MODES[0]), (4, MODES[0]),
                                         (2, MODES[1])])
def test_staleness_is_logged_per_round(tmp_path, k, mode):
    """staleness_max / staleness_mean over the updates applied in each iteration, exactly:
    each (client u, origin o) pair contributes ⌈d/k⌉ − 1 once it is in the pipeline."""
    n, rounds = 8, 5
    cfg = flood_cfg(tmp_path, {"name": "ring", "n": n}, rounds=rounds, mode=mode, hops=k)
    rows = run(cfg).rows
    dist = distances(cfg)
    delays = [expected_delay(dist[o][u], k) for u in range(n) for o in range(n)]
    for r, row in enumerate(rows):
        live = [s for s in delays if s <= r]
        assert row["staleness_max"] == max(live)
        assert row["staleness_mean"] == pytest.approx(sum(live) / len(live), rel=1e-12)
    assert rows[-1]["staleness_max"] == math.ceil(4 / k) - 1  # D = 4, bound ⌈D/k⌉


@pytest.mark.parametrize("mode", MODES)
def test_refresh_drains_folds_and_resynchronises(tmp_path, mode):
    """Under delayed flooding replicas differ by what is in flight and by float rounding
    (they applied the same updates in different batches); the iteration before a refresh
    makes D sends, so everything arrives, and the refresh rebuilds every replica from the
    same history in one canonical order: bit-identical again."""
    cfg = flood_cfg(tmp_path, {"name": "ring", "n": 8}, rounds=7, mode=mode, hops=1,
                    refresh_every=3)
    backend = local_engine(cfg)
    strategy = backend.group.strategy
    assert strategy.phases(1) == ("compute", "apply")
    assert strategy.phases(2) == ("compute", *["forward"] * 3, "apply")  # drain: D = 4 sends
    basis = backend.group.shared.estimator.basis
    u_before = basis.U[0].clone()
    run_rounds(backend, 3)
    # after the drain every replica applied every update sent so far
    for client in backend.group.clients.values():
        assert len(client.state.log) == 3 * 8
    vectors = backend.client_vectors()
    assert max(np.abs(vec - vectors[0]).max() for vec in vectors.values()) < 1e-6
    # the refresh at t = 3 folds U A Vᵀ into W and zeroes A: the model does not change
    clients = list(backend.group.clients.values())
    first = clients[0]
    effective = first.model[0].weight + basis.U[0] @ first.state.replica.A[0] @ basis.V[0].T
    ctx = PhaseContext(3, "compute", 0, backend.group.topology.round_graph(3),
                       backend.group.task, backend.group.shared)
    strategy.begin_phase(ctx, clients)
    after = [c.state.replica.vector() for c in clients]
    for vec in after:  # bit-identical right after the refresh
        np.testing.assert_array_equal(vec, after[0])
    assert all(float(c.state.replica.A.abs().max()) == 0 for c in clients)
    torch.testing.assert_close(first.model[0].weight, effective, rtol=0, atol=1e-6)
    assert not torch.equal(basis.U[0], u_before)
    assert not backend.group.shared.history  # the next history starts empty
    backend.run_round(3)  # (refreshing again with nothing new changes nothing) and trains
    assert len(first.state.log) == 3 * 8 + 3  # its own and its two neighbours (k = 1)


def test_subcge_replicas_share_big_weights_not_buffers(tmp_path):
    backend = local_engine(flood_cfg(tmp_path, {"name": "ring", "n": 4}))
    clients = list(backend.group.clients.values())
    w = [c.model[0].weight.data_ptr() for c in clients]
    b = [c.model[0].bias.data_ptr() for c in clients]
    a = [c.state.replica.A.data_ptr() for c in clients]
    assert len(set(w)) == 1 and len(set(b)) == 4 and len(set(a)) == 4


@pytest.mark.slow  # 40 rounds of two methods on a ring of 16
def test_seedflood_learns_and_matches_dzsgd(tmp_path):
    rounds, n, lr = 40, 16, 0.1
    # evaluated before the first iteration and after the last (every round would cost
    # more than the training)
    base = {"topology": {"name": "ring", "n": n}, "model": {"name": "mlp", "hidden": [16]},
            "eval": {"every": 0, "per_client": False, "initial": True}}
    flood = run(from_dict(tiny(tmp_path, rounds=rounds, **base, strategy={
        "name": "seedflood", "lr": lr, "batch_size": 16, "estimator": "mezo"})))
    dz = run(from_dict(tiny(tmp_path, rounds=rounds, **base, strategy={
        "name": "dzsgd", "lr": lr, "batch_size": 16, "local_steps": 1})))
    start, end = flood.summary["initial_gmp_loss"], flood.rows[-1]["gmp_loss"]
    print(f"GMP test loss before / after {rounds} iterations on a ring of {n}: SeedFlood "
          f"{start:.4f} / {end:.4f}, DZSGD {dz.rows[-1]['gmp_loss']:.4f}")
    assert end < start - 0.1  # clearly better than the start
    assert end <= dz.rows[-1]["gmp_loss"] + 0.01  # at least matches DZSGD
    assert flood.rows[-1]["consensus_distance"] == 0.0  # perfect consensus
    assert dz.rows[-1]["consensus_distance"] > 0.0


def test_mezo_on_a_single_client(tmp_path):
    rows = run(from_dict(tiny(tmp_path, rounds=60, topology={"name": "complete", "n": 1},
                              strategy={"name": "mezo", "lr": 0.02, "batch_size": 16,
                                        "local_steps": 5},
                              model={"name": "mlp", "hidden": [16]},
                              eval={"every": 1, "per_client": False}))).rows
    assert rows[-1]["bytes_total"] == 0
    assert rows[-1]["gmp_loss"] < rows[0]["gmp_loss"] - 0.05


def test_seedflood_config_errors(tmp_path, capsys):
    with pytest.raises(ConfigError) as err:
        check(flood_cfg(tmp_path, {"name": "one_peer", "n": 8}))
    assert err.value.field == "topology.name"
    # more sends than the diameter (SeedFlood-8step on a smaller graph) is SeedFlood with
    # D sends, said in one line
    plan = check(flood_cfg(tmp_path, {"name": "ring", "n": 8}, hops=9))
    assert plan.strategy.k == 4 and plan.strategy.lag == 0
    said = capsys.readouterr().err.strip().splitlines()
    assert said == ["strategy.hops: 9 sends an iteration clamped to the graph's diameter 4 "
                    "(every update has reached every client by then)"]
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
    strip = [{k: v for k, v in r.items() if k != "round_wall_s"} for r in local]
    assert [{k: v for k, v in r.items() if k != "round_wall_s"} for r in remote] == strip


def test_shared_randomness_gossip_grows_with_t(tmp_path):
    """The §3.2 strawman: coefficient lists grow by n per iteration, and so do messages."""
    n, rounds = 6, 4
    cfg = from_dict(tiny(tmp_path, rounds=rounds, topology={"name": "ring", "n": n},
                         strategy={"name": "seed_gossip", "lr": 0.05, "batch_size": 16},
                         model={"name": "mlp", "hidden": [16]},
                         eval={"every": 0, "per_client": False}))
    backend = local_engine(cfg)
    per_round = []
    for r in range(rounds):
        _, traffic = backend.run_round(r)
        assert all(nbytes % 12 == 0 for nbytes in traffic.edge_bytes.values())  # 12 B/entry
        per_round.append(traffic.bytes)
    assert all(b > a for a, b in itertools.pairwise(per_round))
    assert per_round[0] == 12 * 2 * n  # round 0: each list holds only its own seed
    sizes = [len(c.state.coef) for c in backend.group.clients.values()]
    assert all(rounds < size <= n * rounds for size in sizes)
    client = backend.group.clients[0]
    # the model is exactly θ_0 − Σ c z rebuilt from its coefficient list
    rebuilt = local_engine(cfg).group.clients[0].model
    coefs = [(s, float(np.float32(c))) for s, c in sorted(client.state.coef.items())]
    mezo.apply_updates(list(params.trainable_params(rebuilt).values()), coefs)
    np.testing.assert_array_equal(params.flat_vector(rebuilt), params.flat_vector(client.model))
