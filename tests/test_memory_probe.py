"""The memory probe (decent/backends/ray/footprint.py) computes from shapes what shapes say,
measures one batch's activations and nothing else, runs no training step, and says what it
does in one line before it starts; the GPU plan (memory_plan.plan_gpu_memory) adds up each
GPU's actors and refuses one that does not fit in one line naming the field to change."""

from __future__ import annotations

import pytest
import torch

from decent.backends.ray import memory_plan
from decent.backends.ray.footprint import MB, Footprint, probe
from decent.backends.ray.memory_plan import (
    CUDA_CONTEXT_MB,
    check_gpu_fits,
    plan_gpu_memory,
    probe_beside,
)
from decent.core.errors import ConfigError
from decent.engine.config import from_dict
from decent.engine.plan import build_plan
from tests.helpers import tiny

LORA = {"enabled": True, "r": 4, "alpha": 8, "dropout": 0.0,
        "target_modules": ["q_proj", "v_proj"]}


def lora_lm(tmp_path, **sections):
    return tiny(tmp_path, topology={"name": "ring", "n": 4},
                strategy={"name": "dsgd", "local_steps": 2, "batch_size": 4, "lr": 1e-3,
                          "optimizer": "adamw"},
                task={"name": "lm", "corpus": "shakespeare", "seq_len": 16,
                      "max_tokens": 4_000, "max_eval_sequences": 4},
                model={"name": "causal_lm", "path": "tiny-llama", "lora": LORA}, **sections)


def test_an_mlps_footprint_is_its_parameters_times_their_bytes(tmp_path):
    cfg = from_dict(tiny(tmp_path, model={"name": "mlp", "hidden": [16]},
                         strategy={"name": "dsgd", "local_steps": 2, "batch_size": 8,
                                   "lr": 0.1, "momentum": 0.9}))
    f = probe(cfg, build_plan(cfg))
    params = 64 * 16 + 16 + 16 * 10 + 10  # digits MLP 64→16→10, float32
    assert f.model_mb * MB == 4 * params and f.frozen_mb == 0
    assert f.trainable_mb * MB == 4 * params and f.slots == 1  # SGD with momentum
    assert f.edge_mb * MB == 4 * params  # one model to one neighbour
    assert f.message_mb * MB == 2 * 4 * params  # to each of its 2 ring neighbours
    # replica + gradient + momentum slot, and its shard of digits (64 float32 pixels and
    # one int64 label per example: a sixth of the 1 438 training examples, give or take)
    shard = (f.per_client_mb * MB - 3 * 4 * params) / (64 * 4 + 8)
    assert 235 <= shard <= 245 and shard == int(shard)
    # one batch of 8: at least its 8×64 float32 inputs, saved by the first layer
    assert 8 * 64 * 4 <= f.activation_mb * MB < 64 * 1024


def test_lora_adapters_and_adamw_slots_match_peft_and_no_step_runs(tmp_path, monkeypatch):
    """A GPU run's probe (ray.num_gpus_per_actor > 0, batched) builds and counts without
    a phase, a chunk, a backward pass or an optimiser step."""
    from decent.engine import batched, group
    from decent.engine.group import build_task
    from decent.models.registry import MODELS
    from decent.strategies import local_training

    cfg = from_dict(lora_lm(tmp_path, backend="ray", execution={"mode": "batched"},
                            ray={"num_gpus_per_actor": 0.25, "clients_per_actor": 2}))

    def forbidden(*args, **kwargs):
        raise AssertionError("the probe ran a training step")

    for owner, name in [(group.ClientGroup, "run_phase"), (local_training, "one_client_steps"),
                        (batched.Batcher, "__init__"), (torch.optim.AdamW, "step"),
                        (torch.Tensor, "backward")]:
        monkeypatch.setattr(owner, name, forbidden)
    f = probe(cfg, build_plan(cfg))

    torch.manual_seed(cfg.seed)
    model = MODELS.entry("causal_lm").build(cfg.model, build_task(cfg).model_spec())
    adapters, every = model.get_nb_trainable_parameters()  # peft's own count
    assert adapters > 0
    assert f.trainable_mb * MB == 4 * adapters == f.edge_mb * MB
    assert f.frozen_mb * MB == 4 * (every - adapters)  # the base every actor can share
    assert f.slots == 2  # AdamW's two moments
    # a client: its adapters, their gradients and AdamW's two slots, and its shard
    assert f.per_client_mb * MB >= 4 * 4 * adapters
    assert f.activation_mb > 0


def test_the_probe_says_what_it_does_before_it_starts(tmp_path, capsys, monkeypatch):
    cfg = from_dict(tiny(tmp_path))
    said = []
    real = memory_plan.probe
    monkeypatch.setattr(memory_plan, "probe", lambda *a: said.append(
        capsys.readouterr().out) or real(*a))
    probe_beside(cfg, build_plan(cfg), lambda: False)
    line = said[0].splitlines()
    assert len(line) == 1 and line[0].startswith("planning memory: probing clients 0 and 5 "
                                                 "of mlp")
    assert "computed from shapes" in line[0] and "no training step" in line[0]


def test_a_probe_apart_says_it_too_before_it_starts(tmp_path, capsys, monkeypatch):
    """A language model's probe (apart, or here in a driver that has imported
    transformers) prints the same line first."""
    import sys

    import transformers

    monkeypatch.setitem(sys.modules, "transformers", transformers)
    cfg = from_dict(lora_lm(tmp_path))
    said = []
    monkeypatch.setattr(memory_plan, "probe", lambda *a: said.append(
        capsys.readouterr().out) or Footprint(1.0, 0.0, 1.0, 1.0))
    assert memory_plan.probe_apart(cfg, build_plan(cfg)) == Footprint(1.0, 0.0, 1.0, 1.0)
    assert said[0].startswith("planning memory: probing clients 0 and 3 of causal_lm "
                              "tiny-llama on the CPU (computed from shapes")


# a LoRA-like footprint: 300 MB model, 1 MB per client, 10 MB activations per client
F = Footprint(model_mb=300.0, frozen_mb=290.0, per_client_mb=1.0, data_mb=20.0,
              trainable_mb=0.25, slots=2, activation_mb=10.0)
ACTOR_FIXED = CUDA_CONTEXT_MB + 300.0 + 20.0


def test_a_gpu_plan_adds_each_gpus_actors_clients_padding_and_one_chunk():
    groups = [[[0, 1, 2, 3], [4, 5, 6, 7]], [[8, 9, 10]]]
    plan = plan_gpu_memory(F, groups, 80_000.0, chunk=4)
    # GPU 0: two actors of 4 clients, no padding, a chunk of 4 clients' activations
    assert plan.actors_mb[0] == (ACTOR_FIXED + 4 * 1.0 + 4 * 10.0,) * 2
    # GPU 1: 3 clients padded to a chunk of 4: one row of adapters and their 2 slots
    assert plan.actors_mb[1] == (ACTOR_FIXED + 3 * 1.0 + 0.25 * 3 + 3 * 10.0,)
    assert plan.fullest == 0 and plan.fits
    check_gpu_fits(plan)  # fits: nothing raised
    assert plan.describe().startswith("gpu plan: 2 GPU(s), ≤2 actor(s) per GPU × ≤4 clients")


def chunks(actors: int, clients: int) -> list[list[int]]:
    return [list(range(a * clients, (a + 1) * clients)) for a in range(actors)]


@pytest.mark.parametrize(("on_gpu", "gpu_mb", "chunk", "field", "hint"), [
    # 4 actors of 820 + 4 + 40 = 864 MB on a 2 GB GPU: 2 fit, a half GPU each
    (chunks(4, 4), 2_000.0, 4, "ray.num_gpus_per_actor",
     "set ray.num_gpus_per_actor=0.5 (2 actor(s) per GPU)"),
    # one actor whose 64 stacked clients' activations (640 MB) do not fit: 40 do
    (chunks(1, 64), 1_300.0, 64, "execution.chunk", "set execution.chunk=40"),
    # one sequential actor of 20 clients (820 + 20 + 10 MB): 10 clients fit
    (chunks(1, 20), 840.0, 1, "ray.clients_per_actor", "set ray.clients_per_actor=10"),
])
def test_a_gpu_that_cannot_hold_its_actors_is_refused_in_one_line(on_gpu, gpu_mb, chunk,
                                                                  field, hint):
    plan = plan_gpu_memory(F, [on_gpu], gpu_mb, chunk)
    assert not plan.fits
    with pytest.raises(ConfigError) as err:
        check_gpu_fits(plan)
    assert err.value.field == field
    assert hint in err.value.message and "GPU 0 would need" in err.value.message
    assert len(str(err.value).splitlines()) == 1
    # the layout the hint names fits
    fixed = {"ray.num_gpus_per_actor": ([on_gpu[:2]], chunk),
             "execution.chunk": ([on_gpu], 40),
             "ray.clients_per_actor": ([chunks(1, 10)], chunk)}[field]
    check_gpu_fits(plan_gpu_memory(F, fixed[0], gpu_mb, fixed[1]))


def test_one_client_that_cannot_fit_a_gpu_says_so():
    plan = plan_gpu_memory(F, [[[0]]], 500.0, 1)
    with pytest.raises(ConfigError, match="even one actor with one client does not fit"):
        check_gpu_fits(plan)
    assert plan_gpu_memory(F, [[[0]]], None, 1).fits  # an unknown GPU is not checked
