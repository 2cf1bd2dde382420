"""Clients that leave, crash and join: the schedule, what the others see, undeliverable
messages, the joiners' bootstrap, metrics over present clients, methods that refuse churn,
both backends, and a real ClientActor killed mid-run."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import yaml

from decent.backends.local import local_engine
from decent.core.errors import ConfigError
from decent.engine.config import from_dict
from decent.engine.evaluation import mean_model
from decent.network.membership import ChurnConfig, ChurnEvent, Membership
from decent.run.runner import run
from decent.tools.cli import main
from tests.helpers import KillsAnActor, engine_for, rows_and_vectors, tiny

EVENTS = [{"round": 2, "client": 3, "kind": "crash"}, {"round": 3, "client": 1,
                                                        "kind": "leave"},
          {"round": 4, "client": 3, "kind": "join"}, {"round": 5, "client": 5, "kind": "join"}]


def churn(**kw) -> ChurnConfig:
    return ChurnConfig(events=[ChurnEvent(**e) for e in kw.pop("events", [])], **kw)


def test_the_schedule_of_scheduled_events():
    m = Membership.plan(churn(events=EVENTS, absent=[5]), 6, 7, 0)
    present = [sorted(r.present) for r in m.rounds]
    assert present == [[0, 1, 2, 3, 4], [0, 1, 2, 3, 4], [0, 1, 2, 4], [0, 2, 4],
                       [0, 2, 3, 4], [0, 2, 3, 4, 5], [0, 2, 3, 4, 5]]
    # a crash is known one round late; a leave at once
    assert sorted(m.at(2).known) == [0, 1, 2, 3, 4]
    assert sorted(m.at(3).known) == [0, 2, 4]
    assert m.at(4).joined == (3,) and m.at(5).joined == (5,)
    assert m.at(2).departed == ((3, "crash"),) and m.at(3).departed == ((1, "leave"),)


def test_rates_are_seeded_and_act_on_present_and_absent_clients():
    cfg = churn(leave_rate=0.2, join_rate=0.5)
    a, b = Membership.plan(cfg, 20, 30, 7), Membership.plan(cfg, 20, 30, 7)
    assert a.rounds == b.rounds
    assert a.rounds != Membership.plan(cfg, 20, 30, 8).rounds
    for before, now in zip(a.rounds, a.rounds[1:], strict=False):
        left = {c for c, _ in now.departed}
        assert left <= before.present and not set(now.joined) & before.present
        assert now.present == (before.present - left) | set(now.joined)
    assert any(r.departed for r in a.rounds) and any(r.joined for r in a.rounds)


@pytest.mark.parametrize(("cfg", "field", "text"), [
    ({"events": [{"round": 1, "client": 9}]}, "churn.events[0].client", "does not exist"),
    ({"events": [{"round": 1, "client": 2, "kind": "join"}]}, "churn.events[0]",
     "is present"),
    ({"absent": [0, 1, 2, 3, 4, 5]}, "churn.absent", "every client"),
    ({"events": [{"round": 1, "client": 1, "kind": "crash"},
                 {"round": 2, "client": 1, "kind": "leave"}]}, "churn.events[1]",
     "not present"),
])
def test_impossible_schedules_are_one_line(tmp_path, capsys, cfg, field, text):
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(tiny(tmp_path, churn=cfg)))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {field}") and text in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("strategy", "topology", "event", "text"), [
    ({"name": "seedflood"}, {"name": "ring", "n": 6}, {"round": 2, "client": 3,
                                                        "kind": "crash"},
     "client 3 crashes at round 2, but strategy 'seedflood'"),
    ({"name": "choco"}, {"name": "ring", "n": 6}, {"round": 1, "client": 0, "kind": "leave"},
     "client 0 leaves at round 1, but strategy 'choco'"),
    ({"name": "fedavg"}, {"name": "star", "n": 6}, {"round": 1, "client": 0,
                                                     "kind": "leave"},
     "the server (client 0)"),
])
def test_methods_that_cannot_take_churn_are_refused_before_the_run(
        tmp_path, capsys, strategy, topology, event, text):
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(tiny(tmp_path, strategy=strategy, topology=topology,
                                        churn={"events": [event]})))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: churn") and text in err
    assert not (tmp_path / "runs").exists()


def test_a_fedavg_worker_may_leave(tmp_path):
    cfg = tiny(tmp_path, rounds=4, strategy={"name": "fedavg", "local_steps": 1},
               topology={"name": "star", "n": 6},
               churn={"events": [{"round": 1, "client": 2, "kind": "leave"}]})
    rows = run(from_dict(cfg)).rows
    assert [r["live_clients"] for r in rows] == [6, 5, 5, 5]


def test_absent_clients_do_not_run_and_messages_to_a_crashed_one_come_back(tmp_path):
    cfg = from_dict(tiny(tmp_path, rounds=6, churn={"events": EVENTS, "absent": [5]}))
    backend = local_engine(cfg)
    before = backend.group.client_vectors()
    undeliverable, frozen = [], {}
    for r in range(6):
        stats, traffic = backend.run_round(r)
        members = backend.membership.at(r)
        assert set(stats) == set(members.present)  # only present clients report
        undeliverable.append(traffic.undeliverable_messages)
        if r == 2:
            frozen = backend.group.vectors([3])
        if r == 3:  # client 3 crashed at round 2: it has not moved since
            np.testing.assert_array_equal(backend.group.vectors([3])[3], frozen[3])
    # round 2: client 3's ring neighbours (2, 4) still believe it alive and send to it;
    # from round 3 on they know, and no message goes to an absent client
    assert undeliverable == [0, 0, 2, 0, 0, 0]
    # client 5 never ran before joining at round 5
    assert not np.array_equal(backend.group.vectors([5])[5], before[5])


def test_a_joiner_starts_from_the_mean_of_its_present_neighbours(tmp_path):
    cfg = from_dict(tiny(tmp_path, rounds=3, churn={"absent": [2], "events": [
        {"round": 2, "client": 2, "kind": "join"}]}))
    backend = local_engine(cfg)
    for r in range(2):
        backend.run_round(r)
    vectors = backend.group.vectors([1, 3])
    expected = ((vectors[1] + vectors[3]) / 2).astype(np.float32).astype(np.float64)
    seen = {}
    bootstrap = backend.group.bootstrap

    def spy(cid, vector):
        seen[cid] = vector
        bootstrap(cid, vector)

    backend.group.bootstrap = spy
    _, traffic = backend.run_round(2)
    np.testing.assert_array_equal(seen[2], expected)
    d = expected.size
    # each giver sent its model (4·d bytes) besides the round's DSGD traffic
    assert traffic.edge_bytes[(1, 2)] == 4 * d + 4 * d
    assert traffic.edge_bytes[(3, 2)] == 4 * d + 4 * d


def test_metrics_cover_the_present_clients_only(tmp_path):
    cfg = from_dict(tiny(tmp_path, rounds=3, eval={"every": 1, "per_client": False},
                         churn={"events": [{"round": 1, "client": 4, "kind": "leave"}]}))
    backend = local_engine(cfg)
    backend.run_round(0)
    backend.run_round(1)
    present = [0, 1, 2, 3, 5]
    vectors = backend.group.vectors(present)
    mean = mean_model([sum(vectors[c] for c in present)], len(present))
    report = backend.evaluate(per_client=False, present=present)
    want = np.mean([np.sum((vectors[c] - mean) ** 2) for c in present])
    assert report["consensus_distance"] == pytest.approx(want, rel=1e-12)


def test_churn_is_the_same_on_both_backends(tmp_path, ray_session):
    base = tiny(tmp_path, rounds=6, topology={"name": "ring", "n": 8},
                churn={"leave_rate": 0.2, "join_rate": 0.5, "events": [
                    {"round": 2, "client": 6, "kind": "crash"}]})
    ref_rows, ref_vectors = rows_and_vectors(from_dict(base))
    assert len({r["live_clients"] for r in ref_rows}) > 1
    rows, vectors = rows_and_vectors(from_dict({**base, "backend": "ray",
                                                "ray": {"clients_per_actor": 3}}))
    assert rows == ref_rows
    for cid, vec in ref_vectors.items():
        np.testing.assert_array_equal(vectors[cid], vec)


def test_a_killed_client_actor_takes_its_clients_down_and_the_run_goes_on(
        tmp_path, ray_session):
    cfg = from_dict(tiny(tmp_path, rounds=5, topology={"name": "ring", "n": 8},
                         backend="ray", ray={"clients_per_actor": 4},
                         eval={"every": 1, "per_client": True}))
    result = run(cfg, KillsAnActor(engine_for(cfg), 2))
    live = [r.get("live_clients") for r in result.rows]
    assert live[:2] == [None, None] and live[2:] == [4, 4, 4]
    assert all(math.isfinite(r["gmp_loss"]) for r in result.rows)
    assert json.loads((result.run_dir / "summary.json").read_text())["rounds"] == 5


def test_a_method_that_cannot_take_a_real_crash_stops_with_one_line(tmp_path, ray_session):
    cfg = from_dict(tiny(tmp_path, rounds=4, topology={"name": "ring", "n": 8},
                         strategy={"name": "seedflood"}, backend="ray",
                         ray={"clients_per_actor": 4}))
    with pytest.raises(ConfigError) as err:
        run(cfg, KillsAnActor(engine_for(cfg), 1))
    assert "client 4 crashes at round 1, but strategy 'seedflood'" in str(err.value)


def test_a_killed_actor_can_restart_the_run_from_its_checkpoint(tmp_path, ray_session,
                                                                capsys):
    """ray.on_actor_death=restart: fresh actors, back to the last checkpoint, and the run
    ends as if nothing had happened; the restart is said in one line and counted."""
    base = tiny(tmp_path, rounds=6, topology={"name": "ring", "n": 8},
                checkpoint={"every": 2}, eval={"every": 1, "per_client": False})
    reference, _ = rows_and_vectors(from_dict(base))  # eval every round: GMP + consensus
    cfg = from_dict({**base, "backend": "ray",
                     "ray": {"clients_per_actor": 4, "on_actor_death": "restart"}})
    backend = KillsAnActor(engine_for(cfg), 3)
    result = run(cfg, backend)
    assert [{k: v for k, v in r.items() if k != "round_wall_s"} for r in result.rows] == reference
    logged = (result.run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["round"] for line in logged] == list(range(6))
    said = [line for line in capsys.readouterr().out.splitlines() if "restart" in line]
    assert len(said) == 1 and said[0].startswith("restart 1 of at most 3: round 3: ")
    assert said[0].endswith("back to checkpoint-000002"), said
    assert result.summary["restarts"] == 1 and len(result.summary["segments_wall_s"]) == 1
