"""Same seed → identical results on the local and Ray backends, for any grouping."""

import numpy as np
import pytest

from decent.backends.ray.placement import actor_slots, balanced, groups_for, placement
from decent.engine.config import from_dict
from decent.run.runner import run
from tests.helpers import engine_for, rows_and_vectors_on, run_capturing, tiny

VOLATILE = {"round_wall_s"}


def rows_and_params(cfg):
    result, vectors = run_capturing(run, cfg, cfg)
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in result.rows], vectors


TOPOLOGY = {"dsgd": "ring", "choco": "ring", "fedavg": "star", "diloco": "star",
            "gasloc": "two_peer"}


@pytest.mark.parametrize("strategy", [
    {"name": "dsgd", "local_steps": 2, "lr": 0.1},
    {"name": "fedavg", "local_steps": 2, "lr": 0.1, "outer_lr": 0.7, "outer_momentum": 0.9,
     "outer_nesterov": True},
    {"name": "choco", "local_steps": 2, "lr": 0.1, "gossip_step": 0.5,
     "compression": {"name": "topk", "keep": 0.05}},
    {"name": "diloco", "local_steps": 2, "lr": 1e-3,
     "compression": {"name": "int8", "error_feedback": True}},
    {"name": "gasloc", "local_steps": 3, "local_steps_min": 1, "lr": 1e-3, "outer_momentum": 0.3},
], ids=lambda s: s["name"])
def test_local_equals_ray_for_any_grouping(tmp_path, ray_session, strategy):
    """Every strategy on uneven groups (4 + 2 clients); DSGD and GASLoC (whose workers
    draw their own H_i) also on three groups of 2. Grouping is the platform's business,
    the same code for every strategy: more groupings per strategy would only re-test it
    at ~10 s a Ray run."""
    topology = {"name": TOPOLOGY[strategy["name"]], "n": 6}
    base = tiny(tmp_path, rounds=3, topology=topology, strategy=strategy)
    ref_rows, ref_params = rows_and_params(from_dict(base))
    for per_actor in (2, 4) if strategy["name"] in ("dsgd", "gasloc") else (4,):
        cfg = from_dict({**base, "backend": "ray", "ray": {"clients_per_actor": per_actor}})
        rows, vectors = rows_and_params(cfg)
        assert rows == ref_rows
        for cid, vec in ref_params.items():
            np.testing.assert_array_equal(vectors[cid], vec)


@pytest.mark.parametrize("strategy", [{"name": "dsgd", "local_steps": 2, "lr": 0.1},
                                      {"name": "seedflood", "hops": 1}],
                         ids=lambda s: s["name"])
def test_local_equals_ray_with_faults_and_modelled_compute(tmp_path, ray_session, strategy):
    """Drops, delays, a partition, a Byzantine client with a noise attack, per-link
    capacity draws and heterogeneous modelled compute: the same run on both backends."""
    base = tiny(tmp_path, rounds=4, topology={"name": "ring", "n": 6}, strategy=strategy,
                network={"link_mbps": 10, "up_mbps": 15, "link_spread": {"dist": "uniform"}},
                compute={"mode": "modelled", "device_tflops": 1e-5,
                         "speed_spread": {"dist": "lognormal"}},
                faults={"drop": 0.2, "delay": 0.3, "delay_phases": 2, "byzantine": [2],
                        "attack": {"name": "gaussian", "std": 0.1},
                        "partition": {"start": 1, "rounds": 1}})
    ref_rows, ref_params = rows_and_params(from_dict(base))
    assert sum(r["dropped_messages"] for r in ref_rows) > 0
    assert all(r["sim_compute_s"] > 0 for r in ref_rows)
    rows, vectors = rows_and_params(from_dict({**base, "backend": "ray",
                                               "ray": {"clients_per_actor": 4}}))
    assert rows == ref_rows
    for cid, vec in ref_params.items():
        np.testing.assert_array_equal(vectors[cid], vec)


def test_placement_groups_clients_contiguously():
    assert placement(10, 4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert placement(3, 8) == [[0, 1, 2]]


def test_balanced_groups_differ_by_at_most_one_client():
    assert balanced(10, 4) == [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]
    assert balanced(3, 8) == [[0], [1], [2]]  # never more actors than clients
    for n in range(1, 40):
        for actors in range(1, 12):
            groups = balanced(n, actors)
            assert [c for g in groups for c in g] == list(range(n))
            assert len(groups) == min(n, actors)
            assert max(map(len, groups)) - min(map(len, groups)) <= 1


@pytest.mark.parametrize(("ray_cfg", "resources", "slots"), [
    ({}, {"CPU": 2.0}, 2),  # one actor per CPU
    ({"num_cpus_per_actor": 0.5}, {"CPU": 2.0}, 4),
    ({"num_cpus_per_actor": 3}, {"CPU": 2.0}, 1),  # at least one
    ({"num_gpus_per_actor": 0.25}, {"CPU": 16.0, "GPU": 2.0}, 8),  # GPU slots decide
    ({"num_gpus_per_actor": 1}, {"CPU": 16.0, "GPU": 1.0}, 1),
])
def test_auto_sizes_actors_to_the_cluster(tmp_path, ray_cfg, resources, slots):
    cfg = from_dict(tiny(tmp_path, topology={"name": "ring", "n": 64}, ray=ray_cfg))
    assert cfg.ray.clients_per_actor == "auto"  # the default
    assert actor_slots(cfg.ray, resources) == slots
    assert groups_for(cfg, resources) == balanced(64, slots)
    small = from_dict(tiny(tmp_path, topology={"name": "ring", "n": 3}, ray=ray_cfg))
    assert len(groups_for(small, resources)) == min(3, slots)


def test_an_explicit_clients_per_actor_wins(tmp_path):
    cfg = from_dict(tiny(tmp_path, topology={"name": "ring", "n": 10},
                         ray={"clients_per_actor": 4}))
    assert groups_for(cfg, {"CPU": 64.0}) == placement(10, 4)


def test_actor_slots_set_auto_s_share_whatever_the_cluster(tmp_path):
    cfg = from_dict(tiny(tmp_path, topology={"name": "ring", "n": 10},
                         ray={"actor_slots": 4}))
    assert groups_for(cfg, {"CPU": 64.0}) == balanced(10, 4) == [[0, 1, 2], [3, 4, 5],
                                                                 [6, 7], [8, 9]]


def test_auto_on_the_test_session_starts_one_actor_per_cpu_and_matches_local(
        tmp_path, ray_session):
    base = tiny(tmp_path, topology={"name": "ring", "n": 5})
    from decent.backends.local import InProcess
    from decent.backends.ray.executor import RayActors
    from decent.engine.loop import Engine

    ray_cfg = from_dict({**base, "backend": "ray"})
    backend = engine_for(ray_cfg)  # looked at, then run: its actors start once
    local = engine_for(from_dict(base))
    try:
        # one round loop; the backends differ by their executor alone
        assert type(backend) is type(local) is Engine
        assert isinstance(backend.executor, RayActors) and isinstance(local.executor, InProcess)
        assert backend.executor.groups == [[0, 1, 2], [3, 4]]  # the session has 2 CPUs
    except BaseException:
        backend.close()
        raise
    finally:
        local.close()
    local_rows, local_vectors = rows_and_params(from_dict(base))
    rows, vectors = rows_and_vectors_on(backend, ray_cfg)
    assert rows == local_rows
    for cid, vec in local_vectors.items():
        np.testing.assert_array_equal(vectors[cid], vec)




def test_a_later_run_builds_its_clients_in_the_earlier_runs_processes(tmp_path, ray_session):
    """On a Ray the run did not start, the actor processes are handed back at the end and
    the next run of the same actor shape builds its clients there: the same results as
    fresh processes, bit for bit; a kept process that died meanwhile is replaced; with
    ``ray.reuse_actors=false`` every run starts its own."""
    from tests.helpers import rows_and_vectors_on

    base = {**tiny(tmp_path, rounds=3, topology={"name": "ring", "n": 4}), "backend": "ray",
            "ray": {"clients_per_actor": 2}}
    cfg = from_dict(base)

    def ids(engine):
        return [a._actor_id.hex() for a in engine.executor.actors]

    first = engine_for(cfg)
    first_ids = ids(first)
    rows, vectors = rows_and_vectors_on(first, cfg)
    second = engine_for(cfg)
    assert sorted(ids(second)) == sorted(first_ids)  # the same two processes
    kept = list(second.executor.actors)
    again, again_vectors = rows_and_vectors_on(second, cfg)
    assert [{k: v for k, v in r.items() if k != "round_wall_s"} for r in again] == \
        [{k: v for k, v in r.items() if k != "round_wall_s"} for r in rows]
    for cid, vec in vectors.items():
        np.testing.assert_array_equal(again_vectors[cid], vec)
    ray_session.kill(kept[0])  # dies while it waits for the next run
    third = engine_for(cfg)
    try:
        assert len(set(ids(third)) & set(first_ids)) == 1
        third.run_round(0)
    finally:
        third.close()
    fresh = engine_for(from_dict({**base, "ray": {"clients_per_actor": 2,
                                                   "reuse_actors": False}}))
    try:
        assert not set(ids(fresh)) & set(ids(third))
    finally:
        fresh.close()


def test_kept_processes_of_another_shape_make_room_for_a_run_that_needs_their_cpus(
        tmp_path, ray_session):
    """Kept hosts that reserve CPUs (or a GPU share) are killed when a run of another
    shape starts: Ray would queue its actors until those resources were free, for ever
    (a host of 2 CPUs kept on this 2-CPU Ray, then one of half a CPU)."""
    import threading

    from decent.backends.ray import warm

    base = {**tiny(tmp_path, rounds=1, topology={"name": "ring", "n": 4}), "backend": "ray"}
    whole = engine_for(from_dict({**base, "ray": {"clients_per_actor": 4,
                                                  "num_cpus_per_actor": 2}}))
    whole.close()
    held = [k for k in warm._IDLE if k[2:] == (2, 0.0)]
    assert [warm.idle(k) for k in held] == [1]  # kept, holding both CPUs
    started: list = []
    halves = from_dict({**base, "ray": {"clients_per_actor": 4, "num_cpus_per_actor": 0.5}})
    starting = threading.Thread(target=lambda: started.append(engine_for(halves)),
                                daemon=True)
    starting.start()
    starting.join(timeout=60)
    assert started, "the run of half-CPU actors still waits for the kept ones' CPUs"
    try:
        assert warm.idle(held[0]) == 0
        assert len(started[0].executor.actors) == 1
    finally:
        started[0].close()


def test_an_executor_registered_from_a_users_file_runs_the_run(folder, monkeypatch, capsys):
    """``backend:`` names a registered executor: one a config's ``imports:`` file
    registers runs the run (here: the in-process one, counting its phases), and an
    unknown backend is one line naming the executors there are."""
    from decent.engine.executor import EXECUTORS, executor_spec
    from decent.tools.cli import main

    monkeypatch.setattr(EXECUTORS, "_entries", dict(EXECUTORS._entries))
    (folder / "counting.py").write_text(
        "from decent.backends.local import InProcess\n"
        "from decent.engine.executor import EXECUTORS, ExecutorSpec, LocalConfig\n\n"
        "PHASES = []\n\n\n"
        "class Counting(InProcess):\n"
        "    def run_phase(self, *args, **kw):\n"
        "        PHASES.append(args[2])\n"
        "        return super().run_phase(*args, **kw)\n\n\n"
        "EXECUTORS.register('counting', LocalConfig, ExecutorSpec('counting:Counting'))\n")
    cfg = from_dict(tiny(folder, rounds=2, imports=["counting.py"], backend="counting"))
    result, _ = run_capturing(run, cfg, cfg)
    import counting  # the file's module, as imports: loaded it

    assert len(result.rows) == 2 and counting.PHASES  # every phase ran on it
    assert executor_spec("counting").loss_policy(cfg).on_loss == "churn"
    import yaml

    (folder / "run.yaml").write_text(yaml.safe_dump(tiny(folder, imports=["counting.py"])))
    assert main(["run", str(folder / "run.yaml"), "backend=nope"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: backend: unknown backend 'nope'; choose one of: counting, local, ray")


def test_the_executor_spec_decides_which_devices_its_settings_can_give(folder, monkeypatch):
    """The runner asks the backend's spec, never its section's fields: Ray's refuses cuda
    without GPUs reserved for the actors; a user's executor spec with a ``check_device`` of its
    own is asked the same way, before anything starts."""
    from decent.core.errors import ConfigError
    from decent.engine.executor import EXECUTORS, ExecutorSpec, LocalConfig
    from decent.run.runner import check

    with pytest.raises(ConfigError, match=r"ray\.num_gpus_per_actor") as refused:
        check(from_dict(tiny(folder, backend="ray", device="cuda")))
    assert refused.value.field == "device"

    class CpuOnly(ExecutorSpec):
        def check_device(self, cfg) -> None:
            if cfg.device != "cpu":
                raise ConfigError("device", f"cpu_only runs on cpu (got {cfg.device})")

    monkeypatch.setattr(EXECUTORS, "_entries", dict(EXECUTORS._entries))
    EXECUTORS.register("cpu_only", LocalConfig, CpuOnly("decent.backends.local:InProcess"))
    cfg = from_dict(tiny(folder, backend="cpu_only", device="cpu"))
    check(cfg)  # cpu: taken
    cfg.device = "auto"
    with pytest.raises(ConfigError, match="cpu_only runs on cpu"):
        check(cfg)
