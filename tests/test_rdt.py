"""Payloads over Ray Direct Transport (``ray.payload_transport: rdt``), on CPU actors with
Gloo — the code path GPU actors run with NCCL: the sender keeps a large payload, Ray hands
it actor to actor, and the run is the local run bit for bit; nothing kept outlives the
messages that need it; checkpoints, actor deaths and an unavailable transport."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from decent.backends.ray import direct, transport
from decent.backends.ray.layout import requested_transport
from decent.backends.ray.transport import INLINE_BYTES, EncodedTensor, Held
from decent.core.messages import Declared, Message, wire_size
from decent.engine.config import RayConfig, from_dict
from decent.run.runner import resume, run
from tests.helpers import (
    KillsAnActor,
    WrapsBackend,
    engine_for,
    rows_and_vectors,
    run_capturing,
    tiny,
)

# the digits MLP with a hidden layer of 256: 19 210 values, 76 840 bytes a model, so every
# model a DSGD client sends is large enough (≥ 64 KiB) to be kept by its sender
BIG = {"name": "mlp", "hidden": [256]}
# lost, late (across round ends) and partitioned messages: kept payloads nobody receives
FAULTS = {"drop": 0.2, "delay": 0.3, "delay_phases": 2,
          "partition": {"start": 2, "rounds": 1, "parts": 2}}


def big_ring(tmp_path, **sections):
    return tiny(tmp_path, rounds=5, topology={"name": "ring", "n": 6}, model=BIG,
                faults=FAULTS, **sections)


# the local run of each checkpointed config, computed once for the tests that share it
REFERENCES: dict[str, tuple[list[dict], dict[int, np.ndarray]]] = {}


def checkpointed(tmp_path):
    """Six rounds with a checkpoint every two: late messages cross the checkpoints."""
    return {**big_ring(tmp_path, checkpoint={"every": 2}), "rounds": 6}


def reference_of(base, name):
    """The local run of ``base``: rows (no wall time) and final vectors, once per ``name``
    (the run directory is not part of them)."""
    if name not in REFERENCES:
        REFERENCES[name] = rows_and_vectors(from_dict(base))
    return REFERENCES[name]


def over_rdt(base, clients_per_actor=2, **ray):
    return from_dict({**base, "backend": "ray",
                      "ray": {"clients_per_actor": clients_per_actor,
                              "payload_transport": "rdt", **ray}})


def message(src, dst, payload):
    msg = Message(src, dst, "model", payload)
    msg.nbytes = wire_size(payload)
    return msg


def test_keep_holds_each_large_payload_object_once_and_sends_small_ones_inline():
    big, other = torch.arange(INLINE_BYTES // 4, dtype=torch.float32), torch.ones(20_000)
    small = torch.ones(10)
    sent = [message(0, 1, big), message(0, 2, big), message(0, 3, {"x": other}),
            message(0, 4, small), message(0, 5, Declared(big, 8))]
    held: dict[int, object] = {}
    out, next_key = transport.keep(sent, held, actor=3, next_key=7, device=torch.device("cpu"))
    # one key per payload object: the same tensor to two neighbours crosses once
    assert [m.payload for m in out[:3]] == [Held(3, 7), Held(3, 7), Held(3, 8)]
    assert isinstance(out[3].payload, EncodedTensor)  # 40 bytes ride in the message
    # a payload declaring a small wire size travels inline, as through the object store
    assert isinstance(out[4].payload, Declared) and next_key == 9
    # kept as sent (contiguous, on the actor's device): no copy
    assert held[7].data_ptr() == big.data_ptr() and set(held) == {7, 8}
    assert [m.nbytes for m in out] == [m.nbytes for m in sent]

    # the receiving side: its own actor's payloads as kept, another's as Ray handed them
    handed = [(5, {0: torch.full((3,), 2.0)})]
    inbox = {1: [out[0], replace_payload(out[0], Held(5, 0)), out[3]]}
    got = transport.resolve(inbox, 3, held, handed, torch.device("cpu"))[1]
    assert got[0].payload is held[7]
    assert torch.equal(got[1].payload, torch.full((3,), 2.0))
    assert torch.equal(got[2].payload, small)


def replace_payload(msg, payload):
    import dataclasses

    return dataclasses.replace(msg, payload=payload)


@pytest.mark.parametrize(("transport_", "gpus", "wanted"), [
    ("auto", 0, None), ("auto", 0.25, "nccl"), ("rdt", 0, "gloo"), ("rdt", 1, "nccl"),
    ("object_store", 0, None), ("object_store", 1, None)])
def test_auto_moves_gpu_payloads_with_nccl_and_cpu_payloads_through_the_store(
        transport_, gpus, wanted):
    assert requested_transport(RayConfig(payload_transport=transport_,
                                      num_gpus_per_actor=gpus)) == wanted


class Watches(WrapsBackend):
    """Wraps an engine on Ray: counts RDT hand-overs, and at the end compares what every
    actor still keeps with what the messages in flight refer to."""

    def __init__(self, backend):
        super().__init__(backend, -1)
        self.hand_overs = 0
        self.most_per_call = 0
        # per call: the receiving actor and, per actor holding payloads it needs, how many
        self.calls: list[tuple[int, dict[int, int]]] = []
        self.kept: dict[int, list[int]] = {}
        self.needed: dict[int, list[int]] = {}
        self.dropping: dict[int, list[int]] = {}
        hand_overs = backend.executor.direct.hand_overs

        def counting(actors, receiver, inbox):
            keys: dict[int, set[int]] = {}
            for msg in (m for msgs in inbox.values() for m in msgs):
                if isinstance(msg.payload, Held) and msg.payload.actor != receiver:
                    keys.setdefault(msg.payload.actor, set()).add(msg.payload.key)
            self.calls.append((receiver, {a: len(k) for a, k in keys.items()}))
            refs = hand_overs(actors, receiver, inbox)
            self.hand_overs += len(refs)
            self.most_per_call = max(self.most_per_call, len(refs))
            return refs

        backend.executor.direct.hand_overs = counting

    def close(self):
        import ray

        for i, keys in enumerate(ray.get([a.held_keys.remote() for a in self.executor.actors])):
            self.kept[i] = keys
        for msg in self.router.in_flight():
            if isinstance(msg.payload, Held):
                self.needed.setdefault(msg.payload.actor, []).append(msg.payload.key)
        self.dropping = dict(self.executor.direct.releases)  # at each actor's next call
        self.backend.close()


def test_payloads_over_gloo_are_the_local_run_bit_for_bit(tmp_path, ray_session):
    base = big_ring(tmp_path)
    local_rows, local_vectors = rows_and_vectors(from_dict(base))
    cfg = over_rdt(base)  # 3 actors × 2 clients: every ring edge between actors is used
    watched = Watches(engine_for(cfg))
    vectors: dict[int, np.ndarray] = {}
    close = watched.close

    def capture_then_close():
        vectors.update(watched.backend.client_vectors())
        close()

    watched.close = capture_then_close
    result = run(cfg, watched)
    assert [{k: v for k, v in r.items() if k != "round_wall_s"} for r in result.rows] == local_rows
    for cid, vec in local_vectors.items():
        np.testing.assert_array_equal(vectors[cid], vec)
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["ray_payload_path"] == "rdt gloo"
    assert summary["dropped_messages_total"] > 0 and summary["delayed_messages_total"] > 0
    assert summary["partitioned_messages_total"] > 0
    # an actor's clients hear from clients on its two neighbouring actors only: at most
    # one hand-over from each per phase (fewer when faults left nothing to hand over)
    assert watched.hand_overs > 0 and watched.most_per_call == 2
    # what the actors keep at the end is exactly what the messages in flight still need,
    # and what the last phase left nobody needing (dropped at the actor's next call)
    needed = {a: set(k) for a, k in watched.needed.items()}
    assert needed and watched.dropping
    for a, kept in watched.kept.items():
        assert set(kept) == needed.get(a, set()) | set(watched.dropping.get(a, []))
        assert not needed.get(a, set()) & set(watched.dropping.get(a, []))


def test_each_actor_takes_one_model_from_each_neighbouring_actor_per_gossip(
        tmp_path, ray_session):
    """No faults: DSGD's models, sent in its local phase, arrive in its gossip phase.
    Actor k hosts clients 2k and 2k + 1 of the ring of 6 and hears from client 2k − 1
    (actor k − 1) and client 2k + 2 (actor k + 1): one hand-over from each, of one payload
    (a client's one model object, sent to both its neighbours, kept once)."""
    base = tiny(tmp_path, rounds=3, topology={"name": "ring", "n": 6}, model=BIG)
    cfg = over_rdt(base)
    watched = Watches(engine_for(cfg))
    # each transfer must be queued by the driver as its receiving call is submitted (the
    # hand-over finished, where its tensors are known), never later from Ray's callback in
    # the order hand-overs finish: two actors could then queue their send and receive in
    # opposite orders and wait on each other for ever
    import ray

    manager = ray._private.worker.global_worker.rdt_manager
    known_at_submit: list[bool] = []
    submit = manager.queue_or_trigger_out_of_band_tensor_transfer

    def recording(dst_actor, args):
        known_at_submit.extend(manager.get_rdt_metadata(a.hex()).tensor_transport_meta
                               is not None for a in args
                               if isinstance(a, ray.ObjectRef)
                               and manager.is_managed_object(a.hex()))
        return submit(dst_actor, args)

    manager.queue_or_trigger_out_of_band_tensor_transfer = recording
    try:
        run(cfg, watched)
    finally:
        del manager.queue_or_trigger_out_of_band_tensor_transfer
    assert len(known_at_submit) == 3 * 3 * 2 and all(known_at_submit)
    expected = [(k, {(k - 1) % 3: 1, (k + 1) % 3: 1}) for _ in range(3) for k in range(3)]
    assert [call for call in watched.calls if call[1]] == expected
    assert len(watched.calls) == 3 * 2 * 3  # every actor, both phases, every round
    assert watched.hand_overs == 3 * 3 * 2


@pytest.fixture(scope="module")
def lost_and_restarted(ray_session, tmp_path_factory):
    """The checkpointed run over RDT on 2 actors × 3 clients (ring edges 2–3 and 5–0 cross
    between them), its second actor killed as round 3 begins (before the round's first
    hand-over), run once for the two tests below: each run over RDT starts fresh actor
    processes. Its result and config, the final state of every client (left by the engine
    the restart built), and the messages its checkpoints fetched from the actors that
    kept their payloads."""
    from decent.run import runner

    base = checkpointed(tmp_path_factory.mktemp("lost"))
    cfg = over_rdt(base, clients_per_actor=3)
    fetched: list[Message] = []
    vectors: dict[int, np.ndarray] = {}
    fetch, build = direct.DirectPayloads.fetch, runner.make_engine

    def counting(self, actors, *queues):
        fetched.extend(m for queue in queues for msgs in queue.values() for m in msgs
                       if isinstance(m.payload, Held))
        return fetch(self, actors, *queues)

    def capturing(*args):  # the engine the restart builds, which ends the run
        engine = build(*args)
        close = engine.close

        def capture_then_close():
            vectors.update(engine.client_vectors())
            close()

        engine.close = capture_then_close
        return engine

    engine = KillsAnActor(engine_for(cfg), 3)  # built before make_engine is wrapped
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(direct.DirectPayloads, "fetch", counting)
        patch.setattr(runner, "make_engine", capturing)
        result = run(cfg, engine)
    return base, cfg, result, vectors, fetched


def test_an_actor_death_over_rdt_restarts_the_run_from_its_checkpoint(lost_and_restarted):
    """The payloads it kept died with it, so the run cannot go on without its clients
    (``churn``): it goes back to its checkpoint with fresh actors instead, and ends as the
    run that lost nothing, bit for bit. (An actor lost in any other call the engine makes:
    test_actor_loss.)"""
    base, cfg, result, vectors, _ = lost_and_restarted
    reference, ref_vectors = reference_of(base, "checkpointed")  # one local run for both
    assert cfg.ray.on_actor_death == "churn"
    assert result.summary["restarts"] == 1
    assert [{k: v for k, v in r.items() if k != "round_wall_s"} for r in result.rows] == reference
    assert sorted(vectors) == sorted(ref_vectors)
    for cid, vec in ref_vectors.items():
        np.testing.assert_array_equal(vectors[cid], vec)


def test_a_run_resumed_over_rdt_is_the_local_run(lost_and_restarted):
    """Late messages kept by their senders cross the checkpoint: it fetches them. The run
    stopped is the one above (its checkpoint of round 4 written by the actors the restart
    started): one run over RDT less than a run of its own, the same checkpoint to resume."""
    base, cfg, on_ray, _, fetched = lost_and_restarted
    local, local_vectors = reference_of(base, "checkpointed")
    assert fetched  # the checkpoints held messages whose payloads their senders kept
    pointer = json.loads((on_ray.run_dir / "checkpoint.json").read_text())
    assert pointer["next_round"] == 4
    partial = on_ray.run_dir.parent / f".{on_ray.run_dir.name}-stopped.partial"
    import shutil

    shutil.copytree(on_ray.run_dir, partial)
    (partial / "summary.json").unlink()
    resumed, vectors = run_capturing(resume, cfg, partial)
    steady = [{k: v for k, v in r.items() if k != "round_wall_s"} for r in resumed.rows]
    assert steady == local
    for cid, vec in local_vectors.items():
        np.testing.assert_array_equal(vectors[cid], vec)


def test_no_rdt_here_falls_back_to_the_object_store_with_one_line(tmp_path, ray_session,
                                                                  monkeypatch, capsys):
    def unavailable(self, transport_, actors):
        raise RuntimeError("no torch_gloo backend\nsecond line")

    monkeypatch.setattr(direct.DirectPayloads, "__init__", unavailable)
    base = {**big_ring(tmp_path), "rounds": 2}
    reference, _ = rows_and_vectors(from_dict(base))
    # 2 actors × 3 clients: the fallback is the same for any number of actors (3 or 2)
    result = run(over_rdt(base, clients_per_actor=3))
    assert [{k: v for k, v in r.items() if k != "round_wall_s"} for r in result.rows] == reference
    assert ("payloads: Ray Direct Transport over gloo is unavailable (RuntimeError: no "
            "torch_gloo backend); using the object store") in capsys.readouterr().out
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["ray_payload_path"] == "object store"


def test_a_transfer_that_never_came_is_a_lost_payload_not_an_error_of_the_run(ray_session):
    """A sender killed once its call has returned leaves its receiver waiting on the
    transfer until RDT's store gives up with its own TimeoutError: that call read a lost
    payload (the run goes back to its checkpoint), where any other TimeoutError is the
    run's own error, raised."""
    from ray.experimental.rdt.rdt_store import RDTStore

    from decent.backends.ray.losses import gather

    @ray_session.remote(num_cpus=0, max_retries=0)
    def receive(obj_id):  # what a receiver's wait on a transfer from a dead sender does
        return RDTStore().wait_and_pop_object(obj_id, timeout=0.01)

    @ray_session.remote(num_cpus=0, max_retries=0)
    def times_out():
        raise TimeoutError("a strategy's own wait")

    @ray_session.remote(num_cpus=0, max_retries=0)
    def fine():
        return 7

    got, lost, unread = gather({0: fine.remote(), 1: receive.remote("abc")},
                               first_loss_ends=True)
    assert (got, lost, unread) == ({0: 7}, [], [1])
    with pytest.raises(TimeoutError, match="a strategy's own wait"):
        gather({0: times_out.remote()})
