"""Reward models and preference learning (ASO through DSO): the offline Shakespeare pairs
as documented, the reward read at the last real token, the Bradley–Terry loss and pairwise
accuracy against hand computations, the hub path's columns, bad settings, and a reward
model's gradients through the DSO pipeline on both backends."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from decent.backends.local import local_engine
from decent.compression.tree import WHOLE, decompress_tree
from decent.core.errors import ConfigError
from decent.engine.config import from_dict
from decent.models.registry import MODELS
from decent.models.reward_model import rewards
from decent.tasks.corpora import load_corpus
from decent.tasks.preference import hub_pairs, shakespeare_pairs
from decent.tasks.registry import TASKS
from tests.helpers import assert_ray_equals_local, tiny
from tests.test_sources import hub_offline  # noqa: F401  (a fixture)


def aso(tmp_path, n=6, rounds=2, **sections):
    cfg = tiny(tmp_path, rounds=rounds,
               topology={"name": "two_tier", "n": n, "aggregators": 1},
               strategy={"name": "dso", "batch_size": 4, "optimizer": "adamw", "lr": 3e-3,
                         "compression": {"keep": 0.05}, "gossip_rounds": 1,
                         "sensitivity_every": 50},
               task={"name": "preference", "max_pairs": 120, "max_len": 48,
                     "max_eval_pairs": 16},
               model={"name": "reward_model", "path": "tiny-llama"},
               eval={"every": 1, "per_client": False})
    cfg.update(sections)
    return cfg


@pytest.fixture(scope="module")
def task_and_model():
    cfg = from_dict(aso(Path("unused")))
    task = TASKS.entry("preference").build(cfg.task, 0, cfg.model)
    torch.manual_seed(0)
    return task, MODELS.entry("reward_model").build(cfg.model, task.model_spec())


def test_the_offline_pairs_are_lines_and_their_misspelt_copies():
    triples = shakespeare_pairs("auto", None, min_words=6, typo_rate=0.25, limit=300)
    assert len(triples) == 300
    assert triples == shakespeare_pairs("auto", None, 6, 0.25, 300)  # fixed, whatever the run
    lines = [line.strip() for doc in load_corpus("shakespeare").documents
             for line in doc.splitlines()]
    consecutive = set(itertools.pairwise(lines))
    changed = letters = 0
    for prompt, chosen, rejected in triples:
        assert prompt.endswith("\n") and (prompt[:-1], chosen) in consecutive
        assert len(chosen.split()) >= 6 and len(rejected) == len(chosen) != 0
        assert rejected != chosen and (rejected[0], rejected[-1]) == (chosen[0], chosen[-1])
        for a, b in zip(chosen, rejected, strict=True):
            assert a == b or (a.isalpha() and b in "abcdefghijklmnopqrstuvwxyz")
            changed += a != b
            letters += a.isalpha()
    assert 0.15 < changed / letters < 0.3  # a quarter drawn, a few redrawn as themselves


def test_the_reward_is_the_head_on_the_last_real_tokens_state(task_and_model):
    task, model = task_and_model
    pad = model.config.pad_token_id
    pairs = task.train[:4]
    ids = pairs.flatten(0, 1)
    got = rewards(model, ids)
    with torch.no_grad():
        for row, r in zip(ids, got, strict=True):
            real = row[row != pad].unsqueeze(0)  # the text alone, no padding at all
            hidden = model.model(input_ids=real).last_hidden_state[0, -1]
            assert r.item() == pytest.approx(float(model.score(hidden)), abs=1e-5)
    margins = task.margins(model, pairs).detach()
    assert torch.allclose(margins, got.view(-1, 2)[:, 0] - got.view(-1, 2)[:, 1])
    loss = task.loss(model, (pairs, torch.zeros(4)))
    want = sum(math.log1p(math.exp(-float(m))) for m in margins) / 4  # −log σ(m)
    assert float(loss.detach()) == pytest.approx(want, rel=1e-5)


def test_evaluation_is_the_held_out_loss_and_pairwise_accuracy(task_and_model):
    task, model = task_and_model
    metrics = task.evaluate(model, torch.device("cpu"))
    with torch.no_grad():
        margins = task.margins(model, task.val[:16])
    assert metrics["accuracy"] == pytest.approx(float((margins > 0).float().mean()))
    assert metrics["loss"] == pytest.approx(float(-F.logsigmoid(margins).mean()), rel=1e-5)
    assert len(task.val) == 12 and len(task.train) == 108  # val_fraction 0.1 of 120


def test_the_seed_splits_the_same_pairs_differently():
    cfg = from_dict(aso(Path("unused")))
    a = TASKS.entry("preference").build(cfg.task, 0, cfg.model)
    b = TASKS.entry("preference").build(cfg.task, 1, cfg.model)
    def rows(t):
        return {tuple(r.flatten().tolist()) for r in torch.cat([t.train, t.val])}
    assert rows(a) == rows(b) and not torch.equal(a.val, b.val)


def test_hub_pairs_read_the_chosen_and_rejected_columns(monkeypatch, hub_offline):  # noqa: F811
    datasets = hub_offline
    split = {"chosen": ["H: hi A: hello", "same"], "rejected": ["H: hi A: go away", "same"]}
    monkeypatch.setattr(datasets, "load_dataset", lambda path, config=None:
                        datasets.DatasetDict({"train": datasets.Dataset.from_dict(split)}))
    assert hub_pairs("hub:Anthropic/hh-rlhf", None) == [
        ("", "H: hi A: hello", "H: hi A: go away")]  # a pair with no preference is dropped
    monkeypatch.setattr(datasets, "load_dataset", lambda path, config=None:
                        datasets.DatasetDict({"train": datasets.Dataset.from_dict(
                            {"text": ["a"]})}))
    with pytest.raises(ConfigError) as err:
        hub_pairs("hub:some/set", None)
    assert err.value.field == "task.pairs" and "no column chosen, rejected" in err.value.message


def test_the_hub_offline_is_one_line(hub_offline):  # noqa: F811
    with pytest.raises(ConfigError) as err:
        hub_pairs("hub:Anthropic/hh-rlhf", None)
    assert err.value.field == "task.pairs" and "task.pairs=shakespeare" in err.value.message
    assert "\n" not in err.value.message


@pytest.mark.parametrize(("change", "field"), [
    ({"model": {"name": "causal_lm", "path": "tiny-llama"}}, "model.name"),
    ({"task": {"name": "preference", "pairs": "poems"}}, "task.pairs"),
    ({"task": {"name": "preference", "max_pairs": 2, "val_fraction": 0.9}}, "task.max_pairs"),
    ({"task": {"name": "preference", "max_pairs": 4}}, "topology.n"),  # 3 pairs, 5 workers
    ({"model": {"name": "reward_model", "path": "tiny-moe"}}, "model.path"),
])
def test_bad_preference_settings_are_config_errors(tmp_path, change, field):
    with pytest.raises(ConfigError) as err:
        local_engine(from_dict(aso(tmp_path, **change)))
    assert err.value.field == field and "\n" not in err.value.message


def test_reward_model_gradients_go_through_dso(tmp_path):
    backend = local_engine(from_dict(aso(tmp_path)))
    sent = backend.record_messages()
    backend.run_round(0)
    reveals = [m for m in sent if m.tag == "reveal"]
    assert len(reveals) == 5  # every participant's compressed, committed gradient
    model = backend.group.clients[1].model
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert "score.weight" in trainable
    # one Top-K over the whole gradient: its indices range over every trainable value,
    # the reward head's included, and decode to each trainable tensor
    live = dict(model.named_parameters())
    d = sum(live[n].numel() for n in trainable)
    comp = backend.group.strategy.compressor
    for m in reveals:
        assert set(m.payload["update"]) == {WHOLE}
        assert 0 <= int(m.payload["update"][WHOLE]["idx"].max()) < d
        assert list(decompress_tree(comp, m.payload["update"],
                                    {n: live[n] for n in trainable})) == trainable
    backend.close()


def test_aso_on_ray_equals_local(tmp_path, ray_session):
    assert_ray_equals_local(aso(tmp_path, faults={"byzantine": [2], "attack": {"name": "scale"}}),
                            clients_per_actor=3)


def test_a_lora_reward_model_trains_its_adapters_and_its_head(tmp_path):
    lora = {"name": "reward_model", "path": "tiny-llama", "lora": {"enabled": True}}
    backend = local_engine(from_dict(aso(tmp_path, model=lora)))
    sent = backend.record_messages()
    backend.run_round(0)
    model = backend.group.clients[1].model
    trainable = sorted(n for n, p in model.named_parameters() if p.requires_grad)
    assert trainable[-1].endswith("score.modules_to_save.default.weight")
    assert all("lora_" in n for n in trainable[:-1]) and len(trainable) == 9
    reveal = next(m for m in sent if m.tag == "reveal")
    # one Top-K over adapters and head, nothing frozen: indices into their d values
    live = dict(model.named_parameters())
    d = sum(live[n].numel() for n in trainable)
    assert int(reveal.payload["update"][WHOLE]["idx"].max()) < d
    assert d < sum(p.numel() for p in model.parameters()) / 10
    backend.close()
