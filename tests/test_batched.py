"""Batched execution (``execution.mode: batched``): a process's clients step as one stacked
computation and give sequential mode's results — the same batches, the same step counts
and learning rates exactly; parameters and optimiser state within float32 rounding (a
batched kernel sums in another order) — whatever the grouping of clients into processes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from decent.core.errors import ConfigError
from decent.engine.config import from_dict
from decent.engine.execution import ExecutionConfig
from decent.engine.group import ClientGroup
from decent.engine.plan import build_plan
from decent.engine.stacking import Stacking, decide, make_batcher, mode_of
from decent.strategies.dsgd import DSGD
from tests.helpers import (
    assert_ray_equals_local,
    assert_resumed_equals_full,
    rows_and_vectors,
    save_fake_cifar,
    tiny,
)

# float32 parameters after a few rounds of these small runs: sequential and batched sums
# differ in their last bits (measured ≤ 6e-8); a wrong step, batch or weight is ≥ 1e-3
F32_ATOL = 1e-6

STRATEGIES = {
    "dsgd": ({"name": "dsgd", "local_steps": 3, "lr": 0.1, "momentum": 0.9,
              "weight_decay": 1e-3}, "ring"),
    "fedavg": ({"name": "fedavg", "local_steps": 2, "lr": 0.1, "outer_lr": 0.7,
                "outer_momentum": 0.9, "outer_nesterov": True}, "star"),
    "diloco": ({"name": "diloco", "local_steps": 3, "lr": 1e-3, "grad_clip": 0.5,
                "lr_schedule": {"name": "cosine", "warmup_steps": 2}}, "star"),
    "gasloc": ({"name": "gasloc", "local_steps": 4, "local_steps_min": 1, "lr": 0.05,
                "optimizer": "adamw"}, "two_peer"),
    "choco": ({"name": "choco", "local_steps": 2, "lr": 0.1, "gossip_step": 0.5,
               "compression": {"name": "topk", "keep": 0.05}}, "ring"),
    "combo": ({"name": "combo", "local_steps": 3, "lr": 0.1, "segments": 2,
               "replicas": 1}, "ring"),
    "sgp": ({"name": "sgp", "local_steps": 2, "lr": 0.1, "momentum": 0.9}, "directed_exponential"),
    "osgp": ({"name": "osgp", "local_steps": 2, "lr": 0.1, "overlap": 2}, "one_peer_exponential"),
}


def config(tmp_path: Path, name: str, mode: str, **sections):
    strategy, topology = STRATEGIES[name]
    return from_dict(tiny(tmp_path, rounds=4, topology={"name": topology, "n": 6},
                          strategy=strategy, execution={"mode": mode}, **sections))


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_batched_run_equals_sequential(tmp_path, name):
    """Whole runs through the engine (router, gossip, evaluation): every metric row and
    every client's final parameters."""
    seq_rows, seq = rows_and_vectors(config(tmp_path, name, "sequential"))
    bat_rows, bat = rows_and_vectors(config(tmp_path, name, "batched"))
    assert len(seq_rows) == len(bat_rows)
    for a, b in zip(seq_rows, bat_rows, strict=True):
        assert a.keys() == b.keys()
        for key, value in a.items():
            assert b[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    for cid, vec in seq.items():
        np.testing.assert_allclose(bat[cid], vec, rtol=0, atol=F32_ATOL)


def group_after(cfg, rounds: int, cids: list[int] | None = None) -> ClientGroup:
    """The clients ``cids`` (default: all) in one process after ``rounds`` rounds of
    their phases with empty inboxes."""
    group = ClientGroup(cfg, list(range(cfg.n)) if cids is None else cids,
                        torch.device("cpu"), build_plan(cfg))
    for r in range(rounds):
        for step, phase in enumerate(group.strategy.phases(r)):
            group.run_phase(r, step, phase, {})
    return group


@pytest.mark.parametrize("name", ["dsgd", "diloco", "gasloc"])
def test_same_batches_steps_and_optimizer_state(tmp_path, name):
    """SGD with momentum, AdamW with a cosine schedule and clipping, and GASLoC's workers
    with H_i of their own (the shorter ones masked): the same generator states (the same
    draws), the same learning rate left in each optimiser, AdamW's step counts equal to
    the steps each client took, and each state tensor within rounding — held in stacks
    the clients' tensors are views of."""
    seq = group_after(config(tmp_path, name, "sequential"), 3)
    bat = group_after(config(tmp_path, name, "batched"), 3)
    stacks = {p.untyped_storage().data_ptr() for chunk in bat.batcher.chunks
              for p in chunk.params.values()}
    steps_taken = set()
    for cid in seq.cids:
        a, b = seq.clients[cid], bat.clients[cid]
        assert torch.equal(a.generator.get_state(), b.generator.get_state())
        if a.state.optimizer is None:  # FedAvg's server
            continue
        assert [g["lr"] for g in a.state.optimizer.param_groups] == \
            [g["lr"] for g in b.state.optimizer.param_groups]
        for pa, pb in zip(a.model.parameters(), b.model.parameters(), strict=True):
            torch.testing.assert_close(pb, pa, rtol=0, atol=F32_ATOL)
            assert pb.untyped_storage().data_ptr() in stacks
            sa, sb = a.state.optimizer.state[pa], b.state.optimizer.state[pb]
            assert sa.keys() == sb.keys() and sa
            for key in sa:
                if key == "step":
                    assert float(sb[key]) == float(sa[key])
                    steps_taken.add(float(sa[key]))
                else:
                    torch.testing.assert_close(sb[key], sa[key], rtol=0, atol=F32_ATOL)
    if name == "gasloc":  # the workers' H_i differ: masking was exercised
        assert len(steps_taken) > 1


def test_churned_out_clients_are_held(tmp_path):
    """Clients absent in a round keep their rows untouched while their chunk steps."""
    churn = {"events": [{"round": 1, "client": 2, "kind": "crash"},
                        {"round": 3, "client": 2, "kind": "join"}], "absent": [4]}
    seq_rows, seq = rows_and_vectors(config(tmp_path, "dsgd", "sequential", churn=churn))
    bat_rows, bat = rows_and_vectors(config(tmp_path, "dsgd", "batched", churn=churn))
    assert [r["round"] for r in seq_rows] == [r["round"] for r in bat_rows]
    for cid, vec in seq.items():
        np.testing.assert_allclose(bat[cid], vec, rtol=0, atol=F32_ATOL)


@pytest.fixture(scope="module")
def fake_cifar(tmp_path_factory):
    return save_fake_cifar(tmp_path_factory.mktemp("cifar") / "saved", 40, 10)


def cnn_config(tmp_path: Path, data: Path, **sections):
    sections = {"execution": {"mode": "batched"}, "topology": {"name": "ring", "n": 5},
                **sections}
    return tiny(tmp_path, rounds=2,
                task={"name": "cifar10", "data_dir": str(data)},
                model={"name": "cnn", "channels1": 4, "channels2": 4, "hidden": 16},
                strategy={"name": "dsgd", "local_steps": 2, "batch_size": 4, "lr": 0.05,
                          "momentum": 0.9},
                eval={"every": 2}, **sections)


def test_cnn_results_do_not_depend_on_the_grouping(tmp_path, fake_cifar):
    """A batched convolution's summation order depends on how many clients it stacks;
    chunks padded to a fixed width make every grouping compute the same bits."""
    cfg = from_dict(cnn_config(tmp_path, fake_cifar))
    whole = group_after(cfg, 1)
    for groups in ([[0, 1], [2, 3], [4]], [[0, 2, 4], [1, 3]]):
        for cids in groups:
            part = group_after(cfg, 1, cids)
            assert part.batcher.chunks[0].width == 5
            for cid in cids:
                for pa, pb in zip(whole.clients[cid].model.parameters(),
                                  part.clients[cid].model.parameters(), strict=True):
                    assert torch.equal(pa, pb)


def test_auto_stacks_an_mlp_and_keeps_a_cpu_cnn_and_lm_sequential(tmp_path, fake_cifar):
    """On a CPU a stacked convolution is slower than the clients' own, and a stacked LoRA
    forward slower and larger at 16 clients (measured in the benchmark): auto runs those
    one client at a time, an MLP batched."""
    cnn = cnn_config(tmp_path, fake_cifar, execution={"mode": "auto"})
    assert group_after(from_dict(cnn), 0).batcher is None
    assert group_after(lora_config(tmp_path, "auto", {"lr": 0.05}), 0).batcher is None
    mlp = from_dict(tiny(tmp_path, execution={"mode": "auto"}))
    assert group_after(mlp, 0).batcher is not None


def test_batched_ray_equals_local_for_any_grouping(tmp_path, ray_session, fake_cifar):
    """The whole run on Ray, 7 clients in an actor of 5 and an actor of 2 (each chunk
    padded to 7 rows): the local run's rows and every client's final parameters, bit for
    bit."""
    cfg = cnn_config(tmp_path, fake_cifar, topology={"name": "ring", "n": 7})
    assert_ray_equals_local(cfg, 5)


def test_batched_refusals_and_auto_fallback(tmp_path):
    """What cannot be stacked is refused under batched, naming execution.mode, and runs
    sequentially under auto."""
    for strategy in ({"name": "dso"},):
        with pytest.raises(ConfigError) as err:
            from_dict(tiny(tmp_path, strategy=strategy, execution={"mode": "batched"}))
        assert err.value.field == "execution.mode" and "auto" in str(err.value)
    with pytest.raises(ConfigError, match="z-loss"):
        from_dict(tiny(tmp_path, execution={"mode": "batched"},
                       strategy={"name": "dsgd", "logit_z_loss": 1e-4}))
    auto = from_dict(tiny(tmp_path, execution={"mode": "auto"},
                          strategy={"name": "dsgd", "logit_z_loss": 1e-4}))
    assert group_after(auto, 0).batcher is None
    cfg = from_dict(tiny(tmp_path, execution={"mode": "batched"}))
    group = group_after(cfg, 0)
    dropout = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.1))
    with pytest.raises(ConfigError, match="dropout"):
        make_batcher(in_mode(cfg, "batched"), group.strategy, dropout, group.clients)
    assert make_batcher(in_mode(cfg, "auto"), group.strategy, dropout, group.clients) is None
    norm = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    with pytest.raises(ConfigError, match="running statistics"):
        make_batcher(in_mode(cfg, "batched"), group.strategy, norm, group.clients)


def in_mode(cfg, mode):
    return dataclasses.replace(cfg, execution=ExecutionConfig(mode))


def test_unset_is_auto_on_a_gpu_and_sequential_on_a_cpu(tmp_path, monkeypatch):
    """A user who only sets device=cuda gets the fast path: on a GPU every run that can
    stack does (a transformers model too, kept sequential on a CPU), its chunk sized from
    the GPU's free memory; on a CPU an unset mode is sequential."""
    cfg = from_dict(tiny(tmp_path))
    assert cfg.execution.mode is None and mode_of(cfg) == "sequential"
    model = group_after(cfg, 0).base_model
    assert not decide(cfg, DSGD, model, 6).batched
    lora = lora_config(tmp_path, None, {"lr": 0.05})
    lm = group_after(lora, 0).base_model
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (1000 * 2**20, 80_000 * 2**20))
    assert mode_of(cfg) == "auto"  # device: auto, and a GPU is there
    on_gpu = decide(lora, DSGD, lm, 16, per_client_mb=100.0)
    assert on_gpu == Stacking(True, 8)  # ⌊0.8 · 1000 MB / 100 MB⌋ rows, below chunk 256
    assert decide(lora, DSGD, lm, 4, 1.0).chunk == 4  # n caps it


@pytest.mark.parametrize("name", ["dsgd", "diloco"])
def test_a_resumed_batched_run_is_the_run_that_never_stopped(tmp_path, name):
    """A checkpoint restores each optimiser's state as new tensors (load_state_dict):
    they are stacked again before the next steps, and the run goes on bit for bit."""
    assert_resumed_equals_full(config(tmp_path, name, "batched", checkpoint={"every": 2},
                                      faults={"delay": 0.5, "delay_phases": 2}))


def lora_config(tmp_path: Path, mode: str, optimizer: dict, dropout: float = 0.0,
                dtype: str = "float32"):
    return from_dict(tiny(
        tmp_path, topology={"name": "ring", "n": 4},
        task={"name": "lm", "corpus": "shakespeare", "seq_len": 32, "max_tokens": 20_000,
              "partition": "contiguous", "max_eval_sequences": 8},
        model={"name": "causal_lm", "path": "tiny-llama", "dtype": dtype,
               "lora": {"enabled": True, "dropout": dropout}},
        strategy={"name": "dsgd", "local_steps": 3, "batch_size": 4, **optimizer},
        execution={"mode": mode}))


# LoRA with AdamW: Adam's normalised step turns a last-bit difference in a gradient into
# a difference of up to ~lr · 1e-3 in the adapters (measured 5.7e-6 at lr 1e-2)
LORA_ATOL = {"sgd": F32_ATOL, "adamw": 1e-5}
# a bfloat16 base: the activations the adapters see round at 8 bits of mantissa, and a
# stacked matmul may round them otherwise than the clients' own; AdamW normalises such a
# difference into a step of up to lr, so an entry may move by up to steps × lr (3 × 1e-3;
# measured 1.4e-3 on 2 of 3 584 entries), while almost every entry agrees to 1e-4
BF16_ATOL = 3e-3


@pytest.mark.parametrize("optimizer", [
    {"optimizer": "sgd", "momentum": 0.9, "lr": 0.05},
    {"optimizer": "adamw", "lr": 1e-2},
], ids=lambda o: o["optimizer"])
def test_lora_clients_share_one_forward_and_equal_sequential(tmp_path, optimizer):
    """A LoRA language model: the clients' batches go through the shared base in one
    forward, each adapter applied by bmm; the same draws, the same losses and, within
    rounding, the same adapters as clients trained one at a time."""
    seq = group_after(lora_config(tmp_path, "sequential", optimizer), 2)
    bat = group_after(lora_config(tmp_path, "batched", optimizer), 2)
    assert bat.batcher.chunks[0].lora is not None
    for cid in seq.cids:
        a, b = seq.clients[cid], bat.clients[cid]
        assert torch.equal(a.generator.get_state(), b.generator.get_state())
        assert b.stats["loss"] == pytest.approx(a.stats["loss"], rel=1e-6)
        np.testing.assert_allclose(bat.strategy.state_vector(b), seq.strategy.state_vector(a),
                                   rtol=0, atol=LORA_ATOL[optimizer["optimizer"]])


def test_half_precision_lora_clients_equal_sequential_within_rounding(tmp_path):
    """model.dtype: bfloat16 on the batched LoRA path: the frozen base in bfloat16, the
    adapters (and so AdamW's moments, kept in their parameters' dtype) in float32 as peft
    makes them in both modes, the same draws and, within rounding, the same adapters."""
    optimizer = {"optimizer": "adamw", "lr": 1e-3}
    seq = group_after(lora_config(tmp_path, "sequential", optimizer, dtype="bfloat16"), 1)
    bat = group_after(lora_config(tmp_path, "batched", optimizer, dtype="bfloat16"), 1)
    assert bat.batcher.chunks[0].lora is not None
    assert all(p.dtype == torch.float32 for p in bat.batcher.chunks[0].params.values())
    assert {p.dtype for p in bat.base_model.parameters() if not p.requires_grad} >= {
        torch.bfloat16}
    for cid in seq.cids:
        a, b = seq.clients[cid], bat.clients[cid]
        assert b.stats["loss"] == pytest.approx(a.stats["loss"], rel=2e-2)
        mine, theirs = bat.strategy.state_vector(b), seq.strategy.state_vector(a)
        np.testing.assert_allclose(mine, theirs, rtol=0, atol=BF16_ATOL)
        assert np.mean(np.abs(mine - theirs) <= 1e-4) >= 0.99


def test_lora_dropout_is_refused_under_batched(tmp_path):
    """Dropout draws its masks from each client's RNG in sequence; stacked clients
    would draw differently."""
    with pytest.raises(ConfigError, match="dropout"):
        group_after(lora_config(tmp_path, "batched", {"lr": 0.05}, dropout=0.05), 0)
    assert group_after(lora_config(tmp_path, "auto", {"lr": 0.05}, dropout=0.05),
                       0).batcher is None


def test_lora_prompts_of_different_lengths_are_padded_per_client(tmp_path):
    """Prompted classification: each client's batch is as long as its longest prompt; in
    one forward they are right-padded to the longest of all (masked positions after each
    prompt's last token), and each client's loss and adapters stay its own."""
    words = ["good", "bad", "a truly wonderful film with a great cast", "dull",
             "not worth the ticket at all , sadly", "fine", "it drags on and on and on"]
    folder = tmp_path / "data" / "sst2"
    folder.mkdir(parents=True)
    for split, count in (("train", 48), ("dev", 8)):
        rows = [{"sentence": words[i % len(words)] + " " * (i % 3), "label": i % 2}
                for i in range(count)]
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    def cfg(mode: str):
        return from_dict(tiny(
            tmp_path, topology={"name": "ring", "n": 4},
            task={"name": "sst2", "data_dir": str(tmp_path / "data"), "num_train": 48,
                  "num_val": 0, "num_test": 8, "max_length": 32},
            model={"name": "causal_lm", "path": "tiny-llama",
                   "lora": {"enabled": True, "dropout": 0.0}},
            strategy={"name": "dsgd", "local_steps": 2, "batch_size": 3, "lr": 0.05},
            execution={"mode": mode}))

    seq, bat = group_after(cfg("sequential"), 2), group_after(cfg("batched"), 2)
    for cid in seq.cids:
        a, b = seq.clients[cid], bat.clients[cid]
        assert b.stats["loss"] == pytest.approx(a.stats["loss"], rel=1e-6)
        np.testing.assert_allclose(bat.strategy.state_vector(b), seq.strategy.state_vector(a),
                                   rtol=0, atol=F32_ATOL)


def test_the_runner_reaches_the_strategy_through_its_phase_context(tmp_path, monkeypatch):
    """Batched, a phase's context carries the process's runner and every client's steps,
    mix and zeroth-order estimate reach the chunk's stacked computation (one call per
    chunk, not one per client); sequential, the context has none. Nothing is installed in
    a module: two groups in one process keep their own."""
    from decent.engine import batched, stacked_zo
    from decent.engine.stacked import ChunkStack

    served: list[int] = []
    take, mix = ChunkStack.take_steps, ChunkStack.mix
    monkeypatch.setattr(ChunkStack, "take_steps",
                        lambda self, reqs: served.append(len(reqs)) or take(self, reqs))
    monkeypatch.setattr(ChunkStack, "mix",
                        lambda self, reqs: served.append(-len(reqs)) or mix(self, reqs))
    group = group_after(from_dict(tiny(tmp_path, execution={"mode": "batched"})), 1)
    assert served == [6, -6]  # the 6 clients' steps at once, then their mixes at once
    assert group_after(from_dict(tiny(tmp_path)), 1).batcher is None
    estimated: list[int] = []
    estimates = stacked_zo.estimates
    monkeypatch.setattr(batched, "estimates",
                        lambda reqs: estimated.append(len(reqs)) or estimates(reqs))
    group_after(from_dict(tiny(tmp_path, strategy={"name": "mezo"},
                               execution={"mode": "batched"})), 1)
    assert estimated and max(estimated) == 6
    assert group.batcher is not None


def test_auto_on_a_cpu_batches_subcge_estimates_and_keeps_dense_mezo_sequential(tmp_path):
    """Zeroth-order estimates are forward passes: SubCGE's stacked ones measured faster
    than sequential on a CPU, dense MeZO's vmapped ones slower; first-order LoRA
    (transformers) stays sequential there."""
    from types import SimpleNamespace

    cfg = from_dict(tiny(tmp_path, execution={"mode": "auto"}))
    model = group_after(cfg, 0).base_model

    def zo(kind):
        return SimpleNamespace(batchable=True, name="zo", batch_note="", zo_estimator=kind)

    assert decide(cfg, zo("subcge"), model, 6).batched
    mezo = decide(cfg, zo("mezo"), model, 6)
    assert not mezo.batched and "dense MeZO" in mezo.reason
    assert decide(cfg, DSGD, model, 6).batched  # an MLP's steps stack on a CPU
