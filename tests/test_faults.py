"""Injected faults: lost, late and partitioned messages in the router, Byzantine payloads
around a client's outbox, and every strategy running through them."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from decent.backends.local import local_engine
from decent.core.messages import Declared, Message, Scalar, Seed, wire_size
from decent.engine.config import from_dict
from decent.network.faults import FaultsConfig, PartitionConfig, WireFaults, byzantine_clients
from decent.network.router import Router
from decent.network.timing import Network, NetworkConfig
from decent.robust.attacks import ATTACKS, Attack, AttackConfig, ReplayConfig
from decent.run.runner import run
from decent.strategies.registry import STRATEGIES
from decent.topologies import TopologyConfig, build_topology
from tests.helpers import method_config, tiny


def router(n: int, faults: FaultsConfig, name: str = "complete") -> Router:
    return Router(build_topology(TopologyConfig(name=name, n=n)), "dummy",
                  Network(NetworkConfig(), n, 0), WireFaults(faults, n, 0))


def msg(src: int, dst: int, seq: int = 0, payload=None) -> Message:
    payload = torch.zeros(4) if payload is None else payload
    return Message(src, dst, "t", payload, seq=seq, nbytes=wire_size(payload))


def all_pairs(n: int, copies: int) -> list[Message]:
    return [msg(i, j, s) for i in range(n) for j in range(n) if i != j for s in range(copies)]


# ---------------------------------------------------------------- on the wire
def delivered(r: Router, n: int) -> set[tuple[int, int, int]]:
    return {(m.src, m.dst, m.seq) for inbox in r.take(range(n)).values() for m in inbox}


def test_drops_are_a_function_of_the_message_not_of_posting_order():
    n, faults = 8, FaultsConfig(drop=0.3)
    messages = all_pairs(n, 20)  # 1 120 messages
    a, b = router(n, faults), router(n, faults)
    a.post(0, "p", messages)
    for m in reversed(all_pairs(n, 20)):  # another order, in single posts
        b.post(0, "p", [m])
    a.advance()
    b.advance()
    got_a, got_b = delivered(a, n), delivered(b, n)
    assert got_a == got_b
    traffic = a.end_round()
    lost = len(messages) - len(got_a)
    assert traffic.dropped_messages == lost and traffic.messages == len(messages)
    assert traffic.bytes == 16 * len(messages)  # a lost message was sent
    # binomial(1120, 0.3): within 5 standard deviations of its mean
    mean, sd = 0.3 * len(messages), math.sqrt(len(messages) * 0.3 * 0.7)
    assert abs(lost - mean) < 5 * sd


@pytest.mark.parametrize("d", [1, 2, 5])
def test_a_delayed_message_arrives_exactly_d_phases_late_across_rounds(d):
    r = router(3, FaultsConfig(delay=1.0, delay_phases=d))
    r.post(0, "a", [msg(0, 1)])
    r.advance()
    arrivals = []
    for phase in range(1, 8):
        if delivered(r, 3):
            arrivals.append(phase)
        if phase % 2 == 0:  # rounds of two phases: the delay runs over round ends
            r.end_round()
        r.advance()
    assert arrivals == [1 + d]  # an undelayed message would arrive at phase 1


def test_a_partition_cuts_exactly_the_edges_between_blocks_for_its_rounds():
    n = 8
    r = router(n, FaultsConfig(partition=PartitionConfig(start=1, rounds=2, parts=2)), "ring")
    ring = [msg(i, (i + s) % n) for i in range(n) for s in (1, n - 1)]
    for round_ in range(4):
        r.post(round_, "p", ring)
        r.advance()
        got = {(s, t) for s, t, _ in delivered(r, n)}
        traffic = r.end_round()
        cut = {(3, 4), (4, 3), (7, 0), (0, 7)} if round_ in (1, 2) else set()
        assert got == {(m.src, m.dst) for m in ring} - cut
        assert traffic.partitioned_messages == len(cut)
        assert traffic.bytes == 16 * (len(ring) - len(cut))  # a cut message is not sent


def test_a_late_message_is_ordered_after_a_fresh_one_from_the_same_source():
    r = router(2, FaultsConfig())
    first, second = msg(0, 1, payload=Seed(1)), msg(0, 1, payload=Seed(2))
    r.post(0, "a", [first])
    r.advance()
    r.take([1])
    r.post(0, "b", [second])
    r._later[r._phase_no + 1].append(first)  # as if first had been delayed one phase
    r.advance()
    assert [m.payload for m in r.take([1])[1]] == [Seed(1), Seed(2)]


# ---------------------------------------------------------------- Byzantine payloads
def payloads():
    return {
        "tensors": {"w": torch.tensor([1.0, -2.0]), "b": torch.tensor([0.5])},
        "seed and coefficient": (Seed(7), Scalar(0.25)),
        "top-k": Declared({"idx": torch.tensor([3, 1], dtype=torch.int32),
                           "val": torch.tensor([2.0, -1.0])}, nbytes=16),
        "int8": {"q": torch.tensor([5, -3], dtype=torch.int8), "scale": torch.tensor(0.1)},
    }


def flat_floats(payload) -> list[float]:
    if isinstance(payload, torch.Tensor):
        return payload.tolist() if payload.is_floating_point() else []
    if isinstance(payload, Scalar):
        return [payload.value]
    if isinstance(payload, Declared):
        return flat_floats(payload.payload)
    if isinstance(payload, dict):
        return [x for k in sorted(payload) for x in np.ravel(flat_floats(payload[k]))]
    if isinstance(payload, (list, tuple)):
        return [x for v in payload for x in np.ravel(flat_floats(v))]
    return []


def ints(payload) -> list:
    if isinstance(payload, torch.Tensor):
        return [] if payload.is_floating_point() else payload.tolist()
    if isinstance(payload, Seed):
        return [payload.value]
    if isinstance(payload, Declared):
        return ints(payload.payload)
    if isinstance(payload, dict):
        return [ints(payload[k]) for k in sorted(payload)]
    if isinstance(payload, (list, tuple)):
        return [ints(v) for v in payload]
    return []


def noisy(attack: str) -> AttackConfig:
    """``attack``'s config, with std 0.5 where it draws noise (the others have no std)."""
    return ATTACKS.config({"name": attack, **({"std": 0.5} if attack in ("gaussian", "random")
                                              else {})})


@pytest.mark.parametrize("kind", list(payloads()))
@pytest.mark.parametrize(("attack", "expect"), [
    ("sign_flip", lambda x, noise: -x),
    ("scale", lambda x, noise: -4.0 * x),
    ("gaussian", lambda x, noise: x + noise),
    ("random", lambda x, noise: noise),
])
def test_attacks_change_floats_only_and_keep_the_wire_size(kind, attack, expect):
    honest = payloads()[kind]
    out = Attack(noisy(attack))(honest, dst=1, step=0, seq=0,
                                                     seed_words=[1, 2, 3])
    assert wire_size(out) == wire_size(honest)
    assert ints(out) == ints(honest)  # indices, codes and seeds untouched
    before, after = np.array(flat_floats(honest)), np.array(flat_floats(out))
    noise = after - before if attack == "gaussian" else after
    np.testing.assert_allclose(after, expect(before, noise), rtol=1e-6)
    if attack in ("gaussian", "random"):
        assert np.all(noise != 0) and np.std(noise) < 5 * 0.5
        again = Attack(noisy(attack))(honest, 1, 0, 0, [1, 2, 3])
        assert flat_floats(again) == flat_floats(out)  # seeded by the message


def test_replay_sends_what_was_sent_lag_rounds_earlier():
    attack = Attack(ReplayConfig(lag=2))
    sent = [attack({"w": torch.tensor([float(t)])}, dst=1, step=0, seq=0, seed_words=[t])
            for t in range(5)]
    assert [float(p["w"]) for p in sent] == [0, 1, 0, 1, 2]  # current until a history


def test_byzantine_clients_from_a_fraction_of_the_data_holders():
    cfg = FaultsConfig(byzantine_fraction=0.25)
    chosen = byzantine_clients(cfg, 0, list(range(1, 9)))  # a star: 0 holds no data
    assert len(chosen) == 2 and 0 not in chosen and chosen == sorted(chosen)
    assert byzantine_clients(cfg, 0, list(range(1, 9))) == chosen
    assert byzantine_clients(FaultsConfig(byzantine=[5, 2]), 0, list(range(8))) == [2, 5]


def test_a_byzantine_client_sends_the_attacked_payload_and_nothing_else_changes(tmp_path):
    def outgoing(faults):
        backend = local_engine(from_dict(tiny(tmp_path, faults=faults)))
        sent, _ = backend.group.run_phase(0, 0, "local", {})
        return {(m.src, m.dst): m.payload for m in sent}

    clean = outgoing({})
    attacked = outgoing({"byzantine": [2], "attack": {"name": "sign_flip"}})
    assert clean.keys() == attacked.keys()
    for (src, dst), payload in clean.items():
        for name, value in payload.items():
            want = -value if src == 2 else value
            assert torch.equal(attacked[(src, dst)][name], want)


def test_the_summary_names_the_byzantine_clients(tmp_path):
    cfg = tiny(tmp_path, topology={"name": "ring", "n": 10},
               faults={"byzantine_fraction": 0.2, "attack": {"name": "gaussian"}})
    summary = run(from_dict(cfg)).summary
    assert summary["byzantine_clients"] == byzantine_clients(
        FaultsConfig(byzantine_fraction=0.2), 0, list(range(10)))
    assert summary["attack"] == "gaussian"


# ---------------------------------------------------------------- strategies meet faults
def test_gossip_keeps_a_lost_neighbours_weight_and_uses_the_newest_message(tmp_path):
    backend = local_engine(from_dict(tiny(tmp_path, topology={"name": "ring", "n": 4})))
    group, strategy = backend.group, backend.strategy
    client = group.clients[0]
    ctx = group_ctx(group, "gossip")
    w = ctx.graph.weights[0]
    own = {k: v.clone() for k, v in client.model.state_dict().items()}
    fresh = {k: torch.full_like(v, 2.0) for k, v in own.items()}
    stale = {k: torch.full_like(v, 9.0) for k, v in own.items()}
    inbox = [Message(1, 0, "params", stale, sent_phase=0), Message(1, 0, "params", fresh,
                                                                    sent_phase=1)]
    strategy.run_phase(client, inbox, ctx)  # neighbour 3's message was lost
    for name, value in client.model.state_dict().items():
        want = (w[0] + w[3]) * own[name] + w[1] * fresh[name]
        torch.testing.assert_close(value, want)


def group_ctx(group, phase):
    from decent.strategies.base import PhaseContext

    return PhaseContext(0, phase, 1, group.topology.round_graph(0), group.task, group.shared)


def test_fedavg_server_keeps_its_model_when_every_delta_is_lost(tmp_path):
    cfg = tiny(tmp_path, rounds=2, topology={"name": "star", "n": 5},
               strategy={"name": "fedavg", "local_steps": 1}, faults={"drop": 1.0})
    backend = local_engine(from_dict(cfg))
    before = backend.group.client_vectors()
    backend.run_round(0)
    np.testing.assert_array_equal(backend.group.client_vectors()[0], before[0])


ALL_FAULTS = {"drop": 0.2, "delay": 0.2, "delay_phases": 2, "byzantine": [1],
              "partition": {"start": 1, "rounds": 1, "parts": 2}}


@pytest.mark.parametrize("name", STRATEGIES.names)
def test_every_strategy_runs_through_every_fault(tmp_path, name):
    result = run(from_dict(method_config(tmp_path, name, 6, rounds=4, faults=ALL_FAULTS)))
    summary = result.summary
    assert math.isfinite(summary["final_loss"]) and math.isfinite(summary["gmp_loss"])
    assert summary["byzantine_clients"] == [1]
    if name != "mezo":  # mezo sends nothing
        assert summary["dropped_messages_total"] > 0
        assert summary["partitioned_messages_total"] > 0
        assert summary["delayed_messages_total"] > 0
