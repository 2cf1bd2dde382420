"""The Ray backend, lean: frozen weights mapped once per machine, the memory planner's
arithmetic and its estimate against measured actor memory, refusal of a run that cannot
fit, and ``clients_per_actor: auto`` in sweeps."""

import math
import sys

import numpy as np
import pytest
import torch

from decent.backends.local import local_engine
from decent.backends.ray.memory_plan import (
    ACTOR_RUNTIME_MB,
    LM_LIBRARIES_MB,
    MB,
    RAY_DAEMONS_MB,
    Footprint,
    check_fits,
    plan_memory,
    probe,
    probe_apart,
)
from decent.backends.ray.placement import balanced, groups_for, placement
from decent.core.errors import ConfigError, StrategyError
from decent.engine.config import from_dict, to_dict
from decent.engine.group import ClientGroup
from decent.engine.plan import build_plan
from decent.strategies.registry import STRATEGIES
from decent.tools.sweep import Trial, size_actors
from tests.helpers import engine_for, method_config, tiny

LORA = {"enabled": True, "r": 4, "alpha": 8, "dropout": 0.0,
        "target_modules": ["q_proj", "v_proj"]}


def lora_lm(tmp_path, n=4, **sections):
    return tiny(tmp_path, topology={"name": "ring", "n": n},
                strategy={"name": "dsgd", "local_steps": 2, "batch_size": 4, "lr": 0.05},
                task={"name": "lm", "corpus": "shakespeare", "seq_len": 32,
                      "max_tokens": 20_000, "max_eval_sequences": 8},
                model={"name": "causal_lm", "path": "tiny-llama", "lora": LORA},
                **sections)


# ---------------------------------------------------------------- shared frozen weights
def test_adopting_frozen_weights_moves_every_replica_onto_them(tmp_path):
    cfg = from_dict(lora_lm(tmp_path, n=3))
    group = ClientGroup(cfg, [0, 1, 2], torch.device("cpu"), build_plan(cfg))
    frozen = group.shareable()
    assert frozen and all(not p.requires_grad for n, p in group.base_model.named_parameters()
                          if n in frozen)
    copies = {name: t.clone() for name, t in frozen.items()}
    group.adopt(copies)
    for client in group.clients.values():
        params = dict(client.model.named_parameters())
        for name, t in copies.items():
            assert params[name].data_ptr() == t.data_ptr()  # the replicas' too
    bad = {name: t[..., :1].clone() for name, t in list(copies.items())[:1]}
    with pytest.raises(StrategyError, match="does not match"):
        group.adopt(bad)


def test_a_strategy_that_writes_its_frozen_weights_shares_nothing(tmp_path):
    # SubCGE with refreshes folds its subspace into W: each process keeps its own
    cfg = from_dict(tiny(tmp_path, topology={"name": "complete", "n": 2},
                         strategy={"name": "seedflood", "lr": 1e-3, "batch_size": 4,
                                   "rank": 2, "refresh_every": 3},
                         task={"name": "lm", "corpus": "shakespeare", "seq_len": 16,
                               "max_tokens": 4_000, "max_eval_sequences": 4},
                         model={"name": "causal_lm", "path": "tiny-llama"}))
    assert ClientGroup(cfg, [0], torch.device("cpu"), build_plan(cfg)).shareable() == {}


# ---------------------------------------------------------------- the planner's arithmetic
def test_the_probe_counts_the_model_and_each_clients_tensors_exactly(tmp_path):
    cfg = from_dict(tiny(tmp_path, topology={"name": "ring", "n": 4},
                         strategy={"name": "dsgd", "local_steps": 1, "batch_size": 8,
                                   "lr": 0.1, "momentum": 0.9},
                         model={"name": "mlp", "hidden": [32]}))
    f = probe(cfg, build_plan(cfg))
    params = 64 * 32 + 32 + 32 * 10 + 10  # digits MLP 64→32→10
    assert f.model_mb * MB == 4 * params
    assert f.frozen_mb == 0
    assert f.message_mb * MB == 2 * 4 * params  # its model to each of 2 neighbours
    assert f.edge_mb * MB == 4 * params  # one model to one neighbour
    # a client: its replica, its gradients, one momentum slot per value, and its shard of
    # digits (64 float32 pixels and one int64 label per example, a quarter of the 1 438
    # training examples give or take the partition's rounding); its inbox is the plan's
    shard = (f.per_client_mb * MB - 3 * 4 * params) / (64 * 4 + 8)
    assert 355 <= shard <= 365 and shard == int(shard)


def test_a_language_models_probe_runs_apart_and_measures_what_it_would_here(tmp_path,
                                                                           monkeypatch):
    """The driver of a language-model run on Ray probes in a process of its own, so it
    never imports transformers: the footprint is the in-process one, exactly, and a user
    error in it comes back as the same one-line error."""
    cfg = from_dict(lora_lm(tmp_path))
    with monkeypatch.context() as apart:  # as a driver that has not imported them
        for name in ("transformers", "peft"):
            apart.delitem(sys.modules, name, raising=False)
        found = probe_apart(cfg, build_plan(cfg))
        imported = [name for name in ("transformers", "peft") if name in sys.modules]
    assert imported == []
    assert repr(found) == repr(probe(cfg, build_plan(cfg)))

    # found only once the model is built: a module LoRA cannot adapt (apart, as from a
    # driver that has not imported transformers)
    monkeypatch.delitem(sys.modules, "transformers", raising=False)
    wrong = lora_lm(tmp_path)
    wrong["model"]["lora"] = {**LORA, "target_modules": ["no_such_proj"]}
    with pytest.raises(ConfigError) as err:
        probe_apart(from_dict(wrong), build_plan(from_dict(wrong)))
    assert err.value.field == "model.lora.target_modules"
    assert "has no module named no_such_proj" in err.value.message


def test_a_driver_that_imported_transformers_probes_in_its_own_process(tmp_path,
                                                                        monkeypatch):
    """Apart would spare it nothing of the import: no process is started, and the
    footprint is the in-process one."""
    import subprocess

    import transformers  # noqa: F401  (what a notebook that built a model has done)

    def no_process(*args, **kwargs):
        raise AssertionError("the probe started a process")

    monkeypatch.setattr(subprocess, "run", no_process)
    cfg = from_dict(lora_lm(tmp_path))
    assert probe_apart(cfg, build_plan(cfg)) == probe(cfg, build_plan(cfg))


@pytest.mark.parametrize(("suicide", "said"), [
    ("os.kill(os.getpid(), signal.SIGKILL)", "was killed by SIGKILL (out of memory?)"),
    ("raise MemoryError('no room for the model')", "failed (MemoryError: no room for the "
                                                   "model)")])
def test_a_probe_process_that_dies_is_one_line(tmp_path, monkeypatch, suicide, said):
    """The probe's process killed (as the out-of-memory killer does) or crashed before it
    wrote its footprint: one line naming ray.memory_plan, not a traceback."""
    import subprocess

    real = subprocess.run
    monkeypatch.delitem(sys.modules, "transformers", raising=False)
    monkeypatch.setattr(subprocess, "run", lambda args, **kw: real(
        [sys.executable, "-c", f"import os, signal; {suicide}"], **kw))
    cfg = from_dict(lora_lm(tmp_path))
    with pytest.raises(ConfigError) as err:
        probe_apart(cfg, build_plan(cfg))
    assert err.value.field == "ray.memory_plan"
    assert f"the memory probe process {said} before it measured" in err.value.message
    assert len(str(err.value).splitlines()) == 1


def test_plan_arithmetic_matches_its_formula():
    f = Footprint(model_mb=600.0, frozen_mb=500.0, per_client_mb=4.0, data_mb=20.0)
    groups = placement(100, 25)
    shared = plan_memory(f, groups, True, 10_000.0, driver_mb=300.0, model="causal_lm")
    runtime = ACTOR_RUNTIME_MB + LM_LIBRARIES_MB
    per_actor = runtime + 20 + 100 + 25 * 4
    assert shared.per_actor_mb == pytest.approx(per_actor)
    assert shared.actor_pss_mb == pytest.approx(per_actor + 500 / 5)  # 4 actors + the store
    assert shared.node_mb == pytest.approx(RAY_DAEMONS_MB + 300 + 4 * per_actor + 500)
    sending = Footprint(600.0, 500.0, 4.0, 20.0, message_mb=2.0)
    # every client's payloads in flight in the store, and (no graph given) each client's
    # inbox what it sent: 25 × 2 MB per actor
    assert plan_memory(sending, groups, True, None, 300.0, "causal_lm").node_mb == \
        pytest.approx(shared.node_mb + 100 * 2.0 + 4 * 25 * 2.0)
    assert plan_memory(sending, groups, True, None, 300.0, "causal_lm",
                       store_mb=150.0).node_mb == pytest.approx(shared.node_mb + 150.0 + 200)
    # a star: the server (client 0) hears from its 99 workers, each worker from the server
    star = Footprint(600.0, 500.0, 4.0, 20.0, message_mb=2.0, edge_mb=2.0)
    served = plan_memory(star, groups, True, None, 300.0, "causal_lm",
                         degrees=[99] + [1] * 99)
    assert served.inbox_mb == (99 + 24) * 2.0  # the server's actor: it and 24 workers
    assert served.per_actor_mb == pytest.approx(per_actor + (99 + 24) * 2.0)
    assert served.node_mb == pytest.approx(RAY_DAEMONS_MB + 300 + 4 * per_actor + 500
                                           + (99 + 24 + 3 * 25) * 2.0 + 100 * 2.0)
    start = RAY_DAEMONS_MB + 300 + 500 + 4 * (runtime + 20) + 3 * 500
    assert shared.node_peak_mb == pytest.approx(max(shared.node_mb, start))
    own = plan_memory(f, groups, False, 10_000.0, driver_mb=300.0, model="mlp")
    assert own.per_actor_mb == pytest.approx(ACTOR_RUNTIME_MB + 20 + 600 + 25 * 4)
    assert own.node_peak_mb == own.node_mb
    on_gpu = plan_memory(f, groups, False, None, driver_mb=300.0, model="mlp", on_gpu=True)
    assert on_gpu.per_actor_mb == pytest.approx(ACTOR_RUNTIME_MB + 20)


@pytest.mark.parametrize("available", [4_000.0, 6_000.0, 9_000.0])
def test_a_plan_that_does_not_fit_is_refused_with_a_grouping_that_does(available):
    f = Footprint(model_mb=600.0, frozen_mb=0.0, per_client_mb=4.0, data_mb=20.0)
    n = 64

    def replan(groups):
        return plan_memory(f, groups, False, available, driver_mb=300.0, model="mlp")

    mem = replan(placement(n, 4))
    assert mem.node_peak_mb > available
    with pytest.raises(ConfigError) as err:
        check_fits(mem, n, replan)
    assert err.value.field == "ray.clients_per_actor"
    assert f"{mem.node_peak_mb:.0f} MB" in err.value.message
    hinted = [int(w.split("=")[1]) for w in err.value.message.split()
              if w.startswith("ray.clients_per_actor=")]
    if available < RAY_DAEMONS_MB + 300 + ACTOR_RUNTIME_MB + 20 + 600 + n * 4:
        assert not hinted and "even one actor does not fit" in err.value.message
        return
    k = hinted[0]  # the fewest clients per actor that fits: it does, and one actor more does not
    fits = replan(placement(n, k))
    assert fits.node_peak_mb <= available
    check_fits(fits, n, replan)
    more = math.ceil(n / (math.ceil(n / k) + 1))
    if more < k:
        assert replan(placement(n, more)).node_peak_mb > available


def test_a_run_too_big_for_the_node_is_one_line_and_writes_nothing(tmp_path, capsys,
                                                                    ray_session):
    import yaml

    from decent.tools.cli import main

    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(tiny(tmp_path, backend="ray",
                                        ray={"node_memory_mb": 1000})))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ray.clients_per_actor:") and "\n" not in err
    assert "1000 MB are available" in err
    assert not (tmp_path / "runs").exists()


# ---------------------------------------------------------------- estimate vs measured
@pytest.mark.slow  # large models on Ray, measured: ~1 min for the three
@pytest.mark.parametrize(("case", "tolerance"), [("digits", 0.15), ("star", 0.25),
                                                 ("lora", 0.15)])
def test_the_estimate_is_within_tolerance_of_each_actors_measured_memory(
        tmp_path, ray_session, case, tolerance):
    """The proportional set size of every actor after three rounds against the plan's
    estimate for it: a digits MLP large enough that its clients show (2 × 16 clients of
    0.9 M parameters with SGD momentum, each sending its model to 2 neighbours: ~24 MB per
    client); FedAvg on a star of 32 workers, whose server's actor decodes 32 models a
    round (105 MB) where the other decodes 16 (the object-store pages of the 32 models it
    puts and fetches are not modelled: 25 %; without the graph's degrees the server's
    actor was estimated a third under); and tiny-llama with LoRA, its base shared: one
    copy of the frozen weights in the object store, and every client's final state the
    local run's, bit for bit."""
    if case == "digits":
        cfg = tiny(tmp_path, topology={"name": "ring", "n": 32},
                   strategy={"name": "dsgd", "local_steps": 1, "batch_size": 8, "lr": 0.01,
                             "momentum": 0.9},
                   model={"name": "mlp", "hidden": [1024, 768]})
    elif case == "star":
        cfg = tiny(tmp_path, topology={"name": "star", "n": 33},
                   strategy={"name": "fedavg", "local_steps": 1, "batch_size": 8, "lr": 0.01},
                   model={"name": "mlp", "hidden": [1024, 768]})
    else:
        cfg = lora_lm(tmp_path, n=8)
    cfg = from_dict({**cfg, "backend": "ray", "eval": {"every": 0, "per_client": False},
                     # fresh processes: what a run's own actors measure
                     "ray": {"clients_per_actor": -(-cfg["topology"]["n"] // 2),
                             "reuse_actors": False}})
    backend = engine_for(cfg)
    try:
        for r in range(3):
            backend.run_round(r)
        measured = [m["pss"] for m in ray_session.get([a.memory_mb.remote()
                                                       for a in backend.executor.actors])]
        estimates = backend.executor.planned.memory.actors_pss_mb
        vectors = backend.client_vectors()
    finally:
        backend.close()
    assert backend.executor.planned.memory.actor_pss_mb == max(estimates)
    for pss, estimate in zip(measured, estimates, strict=True):
        assert abs(pss - estimate) <= tolerance * pss, (measured, estimates)
    if case == "lora":
        group = ClientGroup(cfg, [0], torch.device("cpu"), build_plan(cfg))
        frozen_bytes = sum(t.numel() * t.element_size() for t in group.shareable().values())
        assert backend.layout["ray_shared_frozen_mb"] == round(frozen_bytes / MB, 1) > 0
        assert backend.layout["ray_actors"] == 2
        local = local_engine(from_dict({**to_dict(cfg), "backend": "local"}))
        try:
            for r in range(3):
                local.run_round(r)
            local_vectors = local.client_vectors()
        finally:
            local.close()
        for cid, vec in local_vectors.items():
            np.testing.assert_array_equal(vectors[cid], vec)


# ---------------------------------------------------------------- sweeps
def test_a_sweep_gives_each_trial_its_share_of_the_actor_slots(tmp_path):
    """``auto`` in a trial follows the one rule a run follows (balanced groups over the
    slots), over the trial's share of the cluster; the validated configs stay as they
    were."""
    cfgs = [from_dict(tiny(tmp_path, backend="ray", topology={"name": "ring", "n": n}))
            for n in (6, 30, 3)]
    trials = [Trial(f"t{i}", (), c) for i, c in enumerate(cfgs)]
    sized = size_actors(trials, parallel=2, resources={"CPU": 8.0})  # 2 at once: 4 each
    assert [t.config.ray.actor_slots for t in sized] == [4, 4, 4]
    assert [groups_for(t.config, {"CPU": 8.0}) for t in sized] == [
        balanced(6, 4), balanced(30, 4), balanced(3, 3)]
    assert [len(g) for g in groups_for(sized[1].config, {"CPU": 8.0})] == [8, 8, 7, 7]
    assert all(c.ray.actor_slots is None and c.ray.clients_per_actor == "auto"
               for c in cfgs)  # not rewritten in place
    local = from_dict(tiny(tmp_path))
    assert size_actors([Trial("l", (), local)], None, {"CPU": 8.0})[0].config is local


# SPES's frozen weights are SharedTensors.frozen == "private": none is ever mapped
@pytest.mark.parametrize("name", [n for n in STRATEGIES.names if n != "spes"])
def test_a_strategy_that_lets_frozen_weights_be_mapped_never_writes_them(tmp_path, name):
    """What the default ``SharedTensors`` promises, run: every frozen tensor of the process
    (the LoRA base; SubCGE's W for SeedFlood) is bit for bit what it was after two rounds."""
    # Combo and DiLoCo default to 40 and 50 local steps a round; two write every trainable
    # tensor as well, and what they must not write (the frozen ones) is the same
    steps = {"strategy": {"local_steps": 2}} if name in ("combo", "diloco") else {}
    cfg = method_config(tmp_path, name, 4, **steps)
    lm = name == "seedflood"  # SubCGE freezes the whole model itself
    cfg.update(rounds=2, task={"name": "lm", "corpus": "shakespeare", "seq_len": 16,
                               "max_tokens": 4_000, "max_eval_sequences": 4},
               model={"name": "causal_lm", "path": "tiny-llama",
                      **({} if lm else {"lora": LORA})})
    backend = local_engine(from_dict(cfg))
    frozen = {k: t.clone() for k, t in backend.group.shareable().items()}
    assert frozen
    for r in range(2):
        backend.run_round(r)
    after = backend.group.shareable()
    for k, t in frozen.items():
        assert torch.equal(after[k], t), k


def test_the_probe_beside_rays_start_reports_both_and_its_errors(tmp_path, monkeypatch):
    from decent.backends.ray import memory_plan

    cfg = from_dict(tiny(tmp_path))
    plan = build_plan(cfg)
    calls = []
    footprint, started = memory_plan.probe_beside(cfg, plan, lambda: calls.append(1) or False)
    assert calls == [1] and started is False
    assert footprint == probe(cfg, plan)

    def broken(*args):
        raise ConfigError("model.path", "cannot read it")

    monkeypatch.setattr(memory_plan, "probe", broken)
    with pytest.raises(ConfigError, match="cannot read it"):
        memory_plan.probe_beside(cfg, plan, lambda: calls.append(2) or False)
    assert calls == [1, 2]  # Ray's start ran regardless, on this thread


def test_decent_run_on_ray_prints_the_plan_and_records_the_layout(tmp_path, capsys,
                                                                  ray_session):
    import json

    import yaml

    from decent.tools.cli import main

    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(tiny(tmp_path, backend="ray", rounds=1,
                                        topology={"name": "ring", "n": 5})))
    assert main(["run", str(path)]) == 0
    out = capsys.readouterr().out
    assert "memory plan: 2 actor(s) × ≤3 clients" in out  # the test session's 2 CPUs
    summary = json.loads(next((tmp_path / "runs").glob("*/summary.json")).read_text())
    assert summary["ray_actors"] == 2 and summary["ray_clients_per_actor"] == "2-3"
    assert summary["ray_payload_path"] == "object store"


def test_digits_are_read_without_scikit_learns_import_and_identical():
    from sklearn.datasets import load_digits

    from decent.tasks.digits import read_digits

    pixels, labels = read_digits()
    reference = load_digits()
    np.testing.assert_array_equal(pixels, reference.data)
    np.testing.assert_array_equal(labels, reference.target)


def test_digits_are_parsed_once_per_process_and_shared_read_only(monkeypatch):
    """Every run a process builds (each run's actors, a sweep's trials) reads the same
    table: parsed once, shared read-only, so no task can change another's data."""
    import torch

    from decent.tasks import digits
    from decent.tasks.digits import DigitsConfig, DigitsTask, read_digits

    digits._parsed.cache_clear()
    parsed: list[int] = []
    loadtxt = np.loadtxt
    monkeypatch.setattr(np, "loadtxt", lambda *a, **kw: parsed.append(1) or loadtxt(*a, **kw))
    pixels, labels = read_digits()
    first = DigitsTask(DigitsConfig(), seed=3)
    first.x_train.mul_(0)  # a task that changes its own tensors in place...
    second = DigitsTask(DigitsConfig(), seed=3)
    assert len(parsed) == 1 and read_digits()[0] is pixels
    assert not pixels.flags.writeable and not labels.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        pixels[0, 0] = 1.0
    # ...leaves the next task built from the shared table as the first was built
    order = np.random.default_rng(3).permutation(len(labels))
    train = order[round(0.2 * len(labels)):]
    assert torch.equal(second.x_train, torch.from_numpy((pixels[train] / 16).astype(np.float32)))
    assert second.x_train.abs().sum() > 0
