"""An actor lost in any call the engine makes of its hosts — a joiner's bootstrap, an
evaluation, a checkpoint, a resume's load — goes through the one ``ray.on_actor_death``
path. Under ``churn`` its clients crash and the run goes on without them; under
``restart`` the run goes back to its checkpoint and ends as the run that lost nothing,
bit for bit. (An actor lost in a phase: test_membership, test_combo and test_rdt; over
RDT, whose kept payloads die with the actor, as a round begins, before its first
hand-over: test_rdt, back to the checkpoint whatever ``ray.on_actor_death`` says.)

Four clients on two actors of two: killing actors[1] takes clients 2 and 3."""

from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from decent.core.errors import ActorLost
from decent.engine.config import from_dict
from decent.run import runner
from decent.run.runner import resume, run
from tests.helpers import WrapsBackend, engine_for, rows_and_vectors, run_capturing, tiny

KILL = 3  # the round the actor dies in (or just after: its evaluation, its checkpoint)
GONE = [2, 3]  # the clients of actors[1]
# payloads ≥ 64 KiB: put in their senders' object store (lost with them), not inline
BIG = {"name": "mlp", "hidden": [256]}


def base(tmp_path: Path, kind: str) -> dict[str, Any]:
    """Five rounds on a ring of 4, checkpoints after rounds 1 and 3 (so a restart in round
    3 goes back to round 2), evaluated every round."""
    sections: dict[str, Any] = {}
    if kind == "join_vectors":  # 0 joins from 1 and 3: 3's actor dies as it is asked
        sections["churn"] = {"absent": [0], "events": [
            {"round": KILL, "client": 0, "kind": "join"}]}
    if kind == "join_bootstrap":  # 3 joins from 2 and 0: its own actor dies as it joins
        sections["churn"] = {"absent": [3], "events": [
            {"round": KILL, "client": 3, "kind": "join"}]}
    if kind == "phase":
        sections["model"] = BIG
    return tiny(tmp_path, rounds=5, topology={"name": "ring", "n": 4},
                checkpoint={"every": 2}, eval={"every": 1, "per_client": False}, **sections)


def on_ray(cfg: dict[str, Any], policy: str) -> Any:
    # no memory plan: its probe builds clients once more per engine, and these are tiny
    ray = {"clients_per_actor": 2, "on_actor_death": policy, "memory_plan": False}
    return from_dict({**cfg, "backend": "ray", "ray": ray})


class KillsIn(WrapsBackend):
    """Wraps an engine on Ray: ray.kill()s actors[1] as the engine makes its call ``kind``
    in (or just after) round ``round_``, the first time only."""

    def __init__(self, backend: Any, round_: int, kind: str) -> None:
        super().__init__(backend, round_)
        self.kind, self.killed = kind, False
        self.saved: dict[str, Any] | None = None
        executor = backend.executor
        if kind in ("join_vectors", "join_bootstrap"):
            self.before(executor, kind.removeprefix("join_"))
        if kind == "phase":
            self.after_first_phase(executor)

    def after_first_phase(self, executor: Any) -> None:
        """The kill once DSGD's first phase of round ``round`` has posted its messages (the
        payloads of clients 2 and 3 in actors[1]'s object store), waited for until Ray
        reports one of them lost: its receivers then read payloads whose owner died."""
        import ray

        call = executor.run_phase

        def killing_after(round_: int, step: int, *args: Any) -> Any:
            out = call(round_, step, *args)
            if step == 0 and not self.killed and round_ == self.round:
                self.kill_now()
                sent = next(m.payload for m in out[1].outgoing
                            if isinstance(m.payload, ray.ObjectRef))
                with contextlib.suppress(ray.exceptions.ObjectLostError):
                    while True:
                        ray.get(sent)
                        time.sleep(0.05)
            return out

        executor.run_phase = killing_after

    def before(self, owner: Any, method: str) -> None:
        """The kill, just before ``owner.method`` reaches the actors in round ``round``."""
        call = getattr(owner, method)

        def killing_first(*args: Any, **kw: Any) -> Any:
            self.kill_now()
            return call(*args, **kw)

        setattr(owner, method, killing_first)

    def kill_now(self) -> None:
        import ray

        if not self.killed and self.backend.current_round == self.round:
            self.killed = True
            ray.kill(self.backend.executor.actors[1])

    def evaluate(self, *args: Any) -> Any:
        if self.kind == "evaluate":
            self.kill_now()
        return self.backend.evaluate(*args)

    def save_state(self) -> Any:
        if self.kind == "save":
            self.kill_now()
        self.saved = self.backend.save_state()
        return self.saved

    def load_state(self, state: Any) -> None:
        if self.kind == "load":  # right after it was built: before the checkpoint loads
            self.kill_now()
        self.backend.load_state(state)


def capture(engine: Any, into: dict[int, Any]) -> Any:
    """``engine``, whose close first leaves its clients' state vectors in ``into``: the
    engine that ends the run leaves its own (an engine given up after a loss has none)."""
    close = engine.close

    def capture_then_close() -> None:
        try:
            got = engine.client_vectors()
            into.clear()
            into.update(got)
        except ActorLost:  # restart: the engine that replaces it ends the run
            pass
        finally:
            close()

    engine.close = capture_then_close
    return engine


def steady(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "round_wall_s"} for r in rows]


def stopped_copy(run_dir: Path) -> Path:
    """The run directory as a run killed after its last row would have left it."""
    partial = run_dir.parent / f".{run_dir.name}-stopped.partial"
    shutil.copytree(run_dir, partial)
    (partial / "summary.json").unlink()
    return partial


REFERENCES: dict[str, tuple[list[dict[str, Any]], dict[int, Any]]] = {}


def reference_of(raw: dict[str, Any], kind: str) -> tuple[list[dict[str, Any]], dict]:
    """The local run of ``raw`` (no actor, nothing lost): rows and final vectors, once per
    kind (the run directory is not part of them)."""
    if kind not in REFERENCES:
        REFERENCES[kind] = rows_and_vectors(from_dict(raw))
    return REFERENCES[kind]


# Every call kind under churn, where each is handled its own way (what crashes, what the
# row and the checkpoint say). Under restart, Engine.lose raises ActorLost before looking
# at the call, so the calls made within a round (the joins, the evaluation) all leave the
# runner's round the same way: one of them runs under restart (a join: the churn schedule
# must replay it after the restart), and so does the checkpoint's save, lost after its
# round's row was logged. A checkpoint loads whole or not at all, so a loss as it loads
# goes back to the checkpoint whatever ray.on_actor_death says: churn only. A loss
# between two phases ("phase") differs from one in a phase only under churn: the payloads
# the lost actor held for its neighbours are lost with it (under restart the round runs
# again).
CASES = [(kind, "churn") for kind in ("evaluate", "save", "join_vectors", "join_bootstrap",
                                      "load", "phase")] + [
    ("save", "restart"), ("join_vectors", "restart")]


# Every kill costs the runs after it one fresh actor process (torch imported, clients
# built: ~3 s of CPU). Started side by side up front, on 2 cores, they take about half
# the time they take one by one, each where a run waits for it: one per kill — each
# case's and the start test's — and the two the first run takes.
SPARES = len(CASES) + 1 + 2


@pytest.fixture(scope="module")
def spare_actors(ray_session, tmp_path_factory):
    """Actor processes of the shape every object-store run here has, started together
    and kept warm (as many as the tests will take, less those already kept)."""
    from decent.backends.ray import warm

    kept = warm.idle(warm.shape_key(0.0, 0.0))
    if kept < SPARES:
        out = tmp_path_factory.mktemp("spares")
        engine_for(from_dict({**tiny(out, topology={"name": "path", "n": 2 * (SPARES - kept)}),
                              "backend": "ray",
                              "ray": {"clients_per_actor": 2, "memory_plan": False}})).close()


@pytest.mark.parametrize(("kind", "policy"), CASES)
def test_an_actor_lost_in_any_call_goes_through_on_actor_death(
        tmp_path, spare_actors, monkeypatch, kind, policy):
    raw = base(tmp_path, kind)
    reference, ref_vectors = reference_of(raw, kind)
    cfg = on_ray(raw, policy)
    vectors: dict[int, Any] = {}  # the final state of the engine that ends the run
    stopped = run_capturing(run, cfg, cfg)[0] if kind == "load" else None
    # killed right after it is built (load), or in round KILL
    engine = KillsIn(capture(engine_for(cfg), vectors), -1 if stopped else KILL, kind)
    build = runner.make_engine  # the engines a restart builds
    monkeypatch.setattr(runner, "make_engine", lambda *a: capture(build(*a), vectors))
    if stopped is not None:  # a run stopped after its checkpoint of round 4, resumed
        result = resume(stopped_copy(stopped.run_dir), engine=engine)
    else:
        result = run(cfg, engine)
    assert engine.killed
    rows = steady(result.rows)
    assert [r["round"] for r in rows] == list(range(5))
    if policy == "restart" or kind == "load":
        # back to the checkpoint (a checkpoint loads whole): the run that lost nothing
        assert rows == reference
        for cid, vec in ref_vectors.items():
            np.testing.assert_array_equal(vectors[cid], vec)
        return
    # churn: clients 2 and 3 crashed in round KILL and the run went on without them
    assert rows[:KILL] == reference[:KILL]
    assert sorted(vectors) == [0, 1]
    assert [r["live_clients"] for r in rows[KILL + 1:]] == [2]
    assert all(np.isfinite(r["gmp_loss"]) for r in rows)
    if kind == "evaluate":  # evaluated over the survivors, and the row says so
        assert rows[KILL]["evaluated_clients"] == 2
    else:
        assert all("evaluated_clients" not in r for r in rows)
    if kind == "save":  # the checkpoint holds the survivors and records the crash
        assert "live_clients" not in rows[KILL]  # logged before the checkpoint
        assert engine.saved is not None
        assert sorted(engine.saved["clients"]) == [0, 1]
        assert engine.saved["lost"] == dict.fromkeys(GONE, KILL)
    else:  # lost in the round (its joins) or its evaluation: the row counts the survivors
        assert rows[KILL]["live_clients"] == 2
    # between DSGD's phases, 2 and 3 had sent their models to 1 and 0 (a ring) from
    # actors[1]'s object store: those payloads died with it, and were never delivered
    assert result.summary.get("messages_lost", 0) == (2 if kind == "phase" else 0)


def test_an_actor_lost_while_the_actors_start_builds_them_again(
        tmp_path, spare_actors, monkeypatch, capsys):
    """No engine yet to go on with: ActorLost, and the runner builds it again (under
    churn too), the run then the run that lost nothing."""
    import ray

    from decent.backends.ray import warm

    raw = base(tmp_path, "evaluate")
    reference, ref_vectors = reference_of(raw, "evaluate")
    start, killed = warm.start, []

    def killing_the_second(key: Any, fresh: Any, *setup: Any, **kw: Any) -> Any:
        host, setting_up = start(key, fresh, *setup, **kw)
        if kw.get("index") == 1 and not killed:  # as it sets up its clients
            killed.append(host)
            ray.kill(host)
        return host, setting_up

    monkeypatch.setattr(warm, "start", killing_the_second)
    vectors: dict[int, Any] = {}
    build = runner.make_engine
    monkeypatch.setattr(runner, "make_engine", lambda *a: capture(build(*a), vectors))
    result = run(on_ray(raw, "churn"))
    assert killed and steady(result.rows) == reference
    said = [line for line in capsys.readouterr().out.splitlines() if "restart" in line]
    assert len(said) == 1, said
    assert said[0].startswith("restart 1 of at most 3: an actor died while the run's actors "
                              "started (") and said[0].endswith("; starting its actors again")
    assert result.summary["restarts"] == 1
    for cid, vec in ref_vectors.items():
        np.testing.assert_array_equal(vectors[cid], vec)
