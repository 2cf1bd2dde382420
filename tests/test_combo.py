"""Combo (segmented gossip): the pull schedule, segment-wise aggregation checked against a
reference computed from the messages that really crossed the router, its special cases
(S = 1 gossip, R = n − 1 all-reduce), bytes and sync time in closed form, churn (a crash,
a leave, newcomers), both backends, and a ClientActor killed mid-run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from decent.backends.local import local_engine
from decent.core.errors import ConfigError
from decent.engine.config import from_dict
from decent.run.runner import run
from decent.strategies.combo import request_peers, segment_bounds
from decent.tools.cli import main
from tests.helpers import WrapsBackend, engine_for, rows_and_vectors, tiny

D = 64 * 16 + 16 + 16 * 10 + 10  # the digits MLP with one hidden layer of 16: 1 210 values


def combo(tmp_path, n=8, rounds=2, topology="complete", churn=None, task=None, **strategy):
    cfg = tiny(tmp_path, rounds=rounds, topology={"name": topology, "n": n},
               strategy={"name": "combo", "local_steps": 2, "batch_size": 8, "lr": 0.1,
                         "segments": 3, "replicas": 2, **strategy},
               eval={"every": 1, "per_client": False})
    if churn is not None:
        cfg["churn"] = churn
    if task is not None:
        cfg["task"] = task
    return cfg


class Recorder:
    """Runs a LocalBackend's rounds and keeps, per round, every client's model after its
    local steps and every message the router accepted (bounced ones included)."""

    def __init__(self, cfg):
        self.backend = local_engine(from_dict(cfg))
        self.sizes = {cid: len(c.data) for cid, c in self.backend.group.clients.items()}
        self.trained: dict[int, np.ndarray] = {}
        self.posted = self.backend.record_messages()
        group = self.backend.group
        run_phase = group.run_phase

        def spy_phase(round_, step, phase, inboxes, members=None):
            out = run_phase(round_, step, phase, inboxes, members)
            if phase == "local":
                self.trained = group.vectors(group.present(members))
            return out

        group.run_phase = spy_phase

    def round(self, r):
        self.posted.clear()  # this round's messages only
        stats, traffic = self.backend.run_round(r)
        return stats, traffic

    def replies(self, cid):
        """{segment: [providers]} of the segments that reached ``cid`` this round."""
        got: dict[int, list[int]] = {}
        for m in self.posted:
            if m.tag == "segment" and m.dst == cid and not m.undeliverable:
                got.setdefault(int(m.payload["header"][1]), []).append(m.src)
        return got

    def expected(self, cid, segments, own=True):
        """The segment-wise data-weighted mean of what ``cid`` received, plus itself."""
        vec = self.trained.get(cid)
        out = np.array(vec if vec is not None else self.backend.group.vectors([cid])[cid])
        got = self.replies(cid)
        for seg, (lo, hi) in enumerate(segment_bounds(out.size, segments)):
            members = sorted(got.get(seg, []) + ([cid] if own else []))
            total = sum(self.sizes[j] * self.trained[j][lo:hi].astype(np.float32)
                        .astype(np.float64) for j in members)
            out[lo:hi] = (total / sum(self.sizes[j] for j in members)).astype(np.float32)
        return out


# ---------------------------------------------------------------- the pull schedule
def test_request_peers_follow_one_permutation_without_replacement():
    order = [5, 2, 7, 1, 4, 0, 6]  # π over m = 7 candidates
    # S·R = 6 ≤ 7: six different peers, in π's order, segment by segment
    assert request_peers(order, 3, 2) == [[5, 2], [7, 1], [4, 0]]
    # S·R = 10 > 7: the first 7 requests use every peer once, then π starts again,
    # and the two peers of a segment always differ
    got = request_peers(order, 5, 2)
    assert [p for seg in got for p in seg] == [order[k % 7] for k in range(10)]
    assert all(len(set(seg)) == 2 for seg in got)
    # R above the candidates: each segment from all of them
    assert request_peers([3, 1], 2, 4) == [[3, 1], [3, 1]]


def test_segments_are_equal_and_the_last_takes_the_remainder():
    assert segment_bounds(10, 3) == [(0, 3), (3, 6), (6, 10)]
    assert segment_bounds(9, 1) == [(0, 9)]


# ---------------------------------------------------------------- aggregation
@pytest.mark.parametrize(("segments", "replicas", "topology"),
                         [(3, 2, "complete"), (4, 3, "complete"), (1, 2, "ring")])
def test_each_segment_is_the_weighted_mean_of_exactly_r_providers_and_itself(
        tmp_path, segments, replicas, topology):
    """Checked against the replies the router carried; Dirichlet shards make the |D_j|
    weights matter. S = 1 on a ring is plain gossip with R (= both) neighbours."""
    cfg = combo(tmp_path, n=7, segments=segments, replicas=replicas, topology=topology,
                task={"name": "digits", "partition": "dirichlet", "alpha": 0.5})
    rec = Recorder(cfg)
    assert len(set(rec.sizes.values())) > 1
    for r in range(2):
        rec.round(r)
        after = rec.backend.group.client_vectors()
        for cid in range(7):
            got = rec.replies(cid)
            available = 6 if topology == "complete" else 2
            assert {seg: len(p) for seg, p in got.items()} == {
                seg: min(replicas, available) for seg in range(segments)}
            peers = [p for ps in got.values() for p in ps]
            if segments * replicas <= available:  # every request to a different peer
                assert len(set(peers)) == len(peers)
            if topology == "ring":
                assert set(peers) == {(cid - 1) % 7, (cid + 1) % 7}
            np.testing.assert_array_equal(after[cid], rec.expected(cid, segments))
            state = rec.backend.group.clients[cid].state
            assert state.providers == [tuple(sorted(got[seg])) for seg in range(segments)]


def test_all_reduce_with_r_equal_n_minus_1(tmp_path):
    """R = n − 1 on the complete graph: every worker ends every round on the same model,
    the data-weighted mean of the trained models (FedAvg, outer lr 1)."""
    cfg = combo(tmp_path, n=5, rounds=3, segments=4, replicas=4,
                task={"name": "digits", "partition": "dirichlet", "alpha": 0.5})
    rec = Recorder(cfg)
    for r in range(3):
        rec.round(r)
        after = rec.backend.group.client_vectors()
        total = sum(rec.sizes[j] * rec.trained[j] for j in range(5))
        mean = (total / sum(rec.sizes.values())).astype(np.float32).astype(np.float64)
        for cid in range(5):
            np.testing.assert_array_equal(after[cid], mean)


@pytest.mark.parametrize(("segments", "replicas", "wire", "value_bytes"),
                         [(3, 2, "float32", 4), (2, 3, "bfloat16", 2), (5, 2, "float32", 4)])
def test_bytes_per_round_match_the_closed_form(tmp_path, segments, replicas, wire,
                                               value_bytes):
    """Per worker and round: S·R requests of 8 bytes, and R replies per segment of
    |l|·(value bytes) + a 12-byte header: n·(8SR + R·(b·d + 12S))."""
    n = 6
    cfg = combo(tmp_path, n=n, rounds=2, segments=segments, replicas=replicas,
                wire_dtype=wire)
    backend = local_engine(from_dict(cfg))
    for r in range(2):
        _, traffic = backend.run_round(r)
        assert traffic.bytes == n * (8 * segments * replicas
                                     + replicas * (value_bytes * D + 12 * segments))
        assert traffic.messages == 2 * n * segments * replicas


def test_sync_time_is_the_closed_form_when_the_pulls_are_symmetric(tmp_path):
    """n = 7, S = 3, R = 2: each worker asks each of the 6 others for one segment, so every
    worker sends and receives 6 segments. Per-pair links of 10 Mbps behind 100 Mbps NICs:
    the serve phase takes max(pair time of one segment, NIC time of all six)."""
    cfg = combo(tmp_path, n=7, rounds=1, segments=3, replicas=2)
    cfg["model"] = {"name": "mlp", "hidden": [15]}  # d = 1 135 values: 3 segments of 378 + 1
    cfg["network"] = {"link_mbps": 10, "node_mbps": 100}
    backend = local_engine(from_dict(cfg))
    d = 64 * 15 + 15 + 15 * 10 + 10
    times = []
    advance = backend.router.advance

    def timed():
        before = backend.router._round.sim_time_s
        advance()
        times.append(backend.router._round.sim_time_s - before)

    backend.router.advance = timed
    backend.run_round(0)
    reply_bits = [8 * (4 * (hi - lo) + 12) for lo, hi in segment_bounds(d, 3)]
    # the largest segment on its own pair link, or six replies through one NIC
    nic = 8 * sum(2 * (4 * (hi - lo) + 12) for lo, hi in segment_bounds(d, 3)) / 100e6
    assert times[1] == pytest.approx(max(max(reply_bits) / 10e6, nic), rel=1e-9)
    assert times[0] == pytest.approx(max(64 / 10e6, 6 * 64 / 100e6), rel=1e-9)  # requests
    assert times[2:] == [0.0] * (len(times) - 2)  # no retries, no messages


# ---------------------------------------------------------------- churn
def test_a_pull_to_a_crashed_worker_is_sent_again_to_another_peer(tmp_path):
    cfg = combo(tmp_path, n=8, rounds=3, segments=3, replicas=2,
                churn={"events": [{"round": 1, "client": 5, "kind": "crash"}]})
    rec = Recorder(cfg)
    rec.round(0)
    _, traffic = rec.round(1)
    bounced = [m for m in rec.posted if m.undeliverable]
    assert bounced and {m.dst for m in bounced} == {5}
    assert traffic.undeliverable_messages == len(bounced)
    for m in bounced:  # the requester asked another peer for the same segment
        segment = int(m.payload[1])
        retry = [x for x in rec.posted if x.tag == "pull" and x.src == m.src
                 and int(x.payload[1]) == segment and not x.undeliverable]
        assert len(retry) == 2 and 5 not in {x.dst for x in retry}
        # re-sent to a peer heard from this round (it asked m.src for a segment), when
        # one not yet asked for that segment exists
        heard = {x.src for x in rec.posted if x.tag == "pull" and x.dst == m.src}
        first = {x.dst for x in retry if x.sent_phase == m.sent_phase}
        if heard - first - {5}:
            assert (set(x.dst for x in retry) - first) <= heard
        assert 5 in rec.backend.group.clients[m.src].state.offline
    for cid in sorted(set(range(8)) - {5}):
        assert {seg: len(p) for seg, p in rec.replies(cid).items()} == {0: 2, 1: 2, 2: 2}
        np.testing.assert_array_equal(rec.backend.group.client_vectors()[cid],
                                      rec.expected(cid, 3))
    _, traffic = rec.round(2)  # known gone now: nobody asks it
    assert traffic.undeliverable_messages == 0
    assert all(5 not in rec.backend.group.clients[c].state.offline for c in range(8) if c != 5)


def test_a_newcomer_pulls_every_segment_and_aggregates_without_its_own_model(tmp_path):
    cfg = combo(tmp_path, n=8, rounds=3, segments=3, replicas=2,
                churn={"absent": [6, 7], "events": [{"round": 1, "client": 6, "kind": "join"},
                                                    {"round": 1, "client": 2,
                                                     "kind": "leave"}]})
    rec = Recorder(cfg)
    rec.round(0)
    stats, _ = rec.round(1)
    assert "loss" not in stats[6] and "loss" in stats[0]  # it did not train
    assert {seg: len(p) for seg, p in rec.replies(6).items()} == {0: 2, 1: 2, 2: 2}
    np.testing.assert_array_equal(rec.backend.group.client_vectors()[6],
                                  rec.expected(6, 3, own=False))
    asked = {m.dst for m in rec.posted if m.tag == "pull"}
    assert 6 not in asked and 2 not in asked and 7 not in asked  # newcomer, gone, absent
    stats, _ = rec.round(2)
    assert "loss" in stats[6]  # it trains from its second round on
    assert 6 in {m.dst for m in rec.posted if m.tag == "pull"}


CHURN = {"absent": [9], "events": [{"round": 1, "client": 3, "kind": "crash"},
                                   {"round": 2, "client": 7, "kind": "leave"},
                                   {"round": 2, "client": 9, "kind": "join"},
                                   {"round": 3, "client": 3, "kind": "join"}]}


def test_combo_with_churn_is_the_same_on_both_backends(tmp_path, ray_session):
    base = combo(tmp_path, n=10, rounds=4, segments=3, replicas=2, churn=CHURN)
    ref_rows, ref_vectors = rows_and_vectors(from_dict(base))
    assert sum(r["undeliverable_messages"] for r in ref_rows) > 0
    rows, vectors = rows_and_vectors(from_dict({**base, "backend": "ray",
                                                "ray": {"clients_per_actor": 4}}))
    assert rows == ref_rows
    for cid, vec in ref_vectors.items():
        np.testing.assert_array_equal(vectors[cid], vec)


class KillsMidRound(WrapsBackend):
    """Wraps an engine on Ray: in ``round_``, once every request of the round's "local" phase
    is posted and before the phase closes, ray.kill()s the actor hosting clients 4..7."""

    def run_round(self, r):
        if r != self.round:
            return self.backend.run_round(r)
        import ray

        router = self.backend.router
        advance = router.advance

        def kill_then_advance():
            router.advance = advance
            ray.kill(self.backend.executor.actors[1])
            advance()

        router.advance = kill_then_advance
        try:
            return self.backend.run_round(r)
        finally:
            router.advance = advance


def test_a_worker_killed_mid_round_loses_no_round(tmp_path, ray_session):
    # the requests the dead actor never read come back a phase late, and a re-sent one
    # may hit another dead peer (they sent requests before dying, so they were heard
    # from this round): three retry phases cover both here
    cfg = from_dict({**combo(tmp_path, n=8, rounds=4, segments=3, replicas=2, retries=3),
                     "backend": "ray", "ray": {"clients_per_actor": 4}})
    result = run(cfg, KillsMidRound(engine_for(cfg), 1))
    rows = result.rows
    assert [r.get("live_clients") for r in rows] == [None, 4, 4, 4]  # at the round end
    # round 1: requests to clients 4..7 (sent before they died) came back and were sent
    # again to the survivors, so every segment still had its two providers
    assert rows[1].get("undeliverable_messages", 0) > 0
    assert rows[2].get("undeliverable_messages", 0) == 0
    assert [r["providers"] for r in rows] == [2, 2, 2, 2]
    assert json.loads((result.run_dir / "summary.json").read_text())["rounds"] == 4


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize(("override", "field"), [
    ("strategy.replicas=8", "strategy.replicas"),
    ("strategy.segments=5000", "strategy.segments"),
    ("strategy.segments=0", "strategy.segments"),
    ("strategy.retries=-1", "strategy.retries"),
])
def test_bad_combo_settings_are_one_line(tmp_path, capsys, override, field):
    import yaml

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(combo(tmp_path)))
    assert main(["run", str(path), override]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and field in err
    assert not (tmp_path / "runs").exists()


def test_replicas_above_the_peers_is_refused_at_build(tmp_path):
    with pytest.raises(ConfigError, match="replicas"):
        engine_for(from_dict(combo(tmp_path, n=4, replicas=4)))
