"""Reward models: a causal LM's decoder with a scalar head (``model.name: reward_model``).

This is the reward model of RLHF (Ouyang et al., 2022; ASO's participants train one each):
the decoder reads ``prompt ‖ response`` and a linear head without bias maps the hidden
state of the last real token to one number, r. transformers' ``*ForSequenceClassification``
with ``num_labels = 1`` is exactly that model (it pools at the last token that is not the
pad token), so it is built through ``AutoModelForSequenceClassification``:

* tiny aliases (``tiny-llama``, ``tiny-opt``): the tiny config with a fresh head, weights
  from torch's global generator (seed it first);
* SmolLM2 and hub / local checkpoints: the pretrained decoder and a fresh head (the LM
  head is not loaded: a reward model has no use for it).

With ``lora.enabled`` the decoder gets LoRA adapters and the head stays fully trainable
(peft's ``modules_to_save``). ``model.path`` accepts what ``causal_lm`` accepts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from decent.core.errors import ConfigError
from decent.core.schema import text
from decent.models.causal_lm import DTYPES, CausalLMConfig, load_tokenizer
from decent.models.experts import split_experts
from decent.models.gguf import converted_smollm2
from decent.models.lora import apply_lora
from decent.models.model_paths import hub_error, resolve
from decent.models.tiny import tiny_config

HEAD = "score"  # transformers' name of the sequence-classification head


@dataclass
class RewardModelConfig(CausalLMConfig):
    name: str = text("reward_model", nullable=False)


def build_reward_model(cfg: RewardModelConfig, spec: dict[str, Any] | None = None) -> nn.Module:
    """The reward model of ``cfg.path`` in ``cfg.dtype`` (eval mode), LoRA if enabled."""
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    cfg.validate()
    dtype = DTYPES[cfg.dtype]
    kind, where = resolve(cfg.path)
    if kind == "tiny":
        config = tiny_config(where)
        config.num_labels = 1
        try:
            model = AutoModelForSequenceClassification.from_config(config, dtype=dtype)
        except ValueError:
            raise ConfigError("model.path", f"{where} has no sequence-classification class "
                              "in transformers: use tiny-llama or tiny-opt") from None
    else:
        if kind == "gguf":
            where = str(converted_smollm2(cfg.cache_dir))
        hf_logging.disable_progress_bar()
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # "score.weight newly initialised": it is, by design
        try:
            model = AutoModelForSequenceClassification.from_pretrained(
                where, num_labels=1, dtype=dtype)
        except (OSError, ValueError) as err:
            if kind == "hub":
                raise hub_error(where, str(err).splitlines()[0]) from None
            raise ConfigError("model.path", f"cannot load {where!r}: {err}") from None
        finally:
            hf_logging.set_verbosity(verbosity)
        if model.config.pad_token_id is None:  # pooling finds the last token by the pad id
            model.config.pad_token_id = load_tokenizer(cfg).pad_token_id
    split_experts(model)
    if cfg.lora.enabled:
        model = apply_lora(model, cfg.lora, task_type="SEQ_CLS", modules_to_save=[HEAD])
    return model.eval()


def rewards(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """r for each row of ``ids`` (right-padded with the model's pad id), float32."""
    pad = model.config.pad_token_id
    out = model(input_ids=ids, attention_mask=(ids != pad).long()).logits
    return out[:, 0].float()
