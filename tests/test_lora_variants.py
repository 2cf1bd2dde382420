"""LoRA variants of DSGD, CHOCO-SGD, DZSGD (and GASLoC): only adapter tensors are trained,
only adapter tensors travel, and the frozen base stays bit for bit what it was."""

import math

import pytest
import torch

from decent.backends.local import local_engine
from decent.engine.config import from_dict
from decent.models import params
from tests.helpers import tiny

LORA = {"enabled": True, "r": 4, "alpha": 8, "dropout": 0.0,
        "target_modules": ["q_proj", "v_proj"]}
STRATEGIES = {
    "dsgd": {"name": "dsgd", "local_steps": 2, "batch_size": 4, "lr": 0.05},
    "choco": {"name": "choco", "local_steps": 2, "batch_size": 4, "lr": 0.05,
              "compression": {"name": "topk", "keep": 0.1}},
    "dzsgd": {"name": "dzsgd", "local_steps": 2, "batch_size": 4, "lr": 1e-3, "eps": 1e-2},
    "gasloc": {"name": "gasloc", "local_steps": 2, "batch_size": 4, "lr": 1e-2},
}


def lora_backend(tmp_path, strategy):
    return local_engine(from_dict(tiny(
        tmp_path, topology={"name": "ring", "n": 3}, strategy=strategy,
        task={"name": "lm", "corpus": "shakespeare", "seq_len": 32, "max_tokens": 20_000,
              "max_eval_sequences": 8},
        model={"name": "causal_lm", "path": "tiny-llama", "lora": LORA},
    )))


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_only_adapters_train_and_travel(tmp_path, name):
    backend = lora_backend(tmp_path, STRATEGIES[name])
    group = backend.group
    sent = []
    run_phase = group.run_phase

    def recording(*args, **kwargs):
        out = run_phase(*args, **kwargs)
        sent.extend(out[0])  # (messages, compute times)
        return out

    group.run_phase = recording
    model = group.clients[0].model
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    adapters = params.trainable_params(model)
    assert adapters and all("lora_" in k for k in adapters)
    for r in range(2):
        backend.run_round(r)
    after = dict(model.named_parameters())
    changed = {k for k, v in before.items() if not torch.equal(v, after[k].detach())}
    assert changed and changed <= set(adapters)  # the base never moves
    assert any("lora_B" in k for k in changed)
    assert sent and all(set(m.payload) <= set(adapters) for m in sent)
    d_lora = sum(p.numel() for p in adapters.values())
    if name == "choco":
        k = sum(max(1, math.ceil(0.1 * p.numel())) for p in adapters.values())
        assert {m.nbytes for m in sent} == {8 * k}
    else:
        assert {m.nbytes for m in sent} == {4 * d_lora}
