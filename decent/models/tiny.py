"""Tiny randomly initialised causal LMs, built from a config without any download.

They stand in for real checkpoints in tests and smoke runs: the same classes and code paths
as the real families (rotary attention with grouped-query heads, OPT's learned positions and
biases, a routed mixture of experts), at sizes where a forward on a few short sequences takes
milliseconds on one CPU core. Shapes:

* ``tiny-llama``: ``LlamaForCausalLM``, 2 layers, hidden 64, 4 query / 2 key-value heads
  (SmolLM2-135M has 9 / 3), intermediate 128, tied embeddings like SmolLM2.
* ``tiny-opt``: ``OPTForCausalLM``, 2 layers, hidden 64, 4 heads, ffn 128; the other
  settings are OPT-125m's (pre-layer-norm, biases, tied embeddings, dropout 0.1).
* ``tiny-moe``: ``OlmoeForCausalLM``, 2 layers, hidden 64, 4 / 2 heads, 4 experts of
  intermediate 64 each, top-2 routing. OLMoE is the cleanest MoE class in transformers 5.x:
  every MLP is routed (no shared expert, unlike ``Qwen2MoeForCausalLM``) and attention has no
  biases, so "shared" parameters are exactly attention, norms, routers and embeddings.

Two larger random MoE models of the same ``OlmoeForCausalLM`` class serve MoE pretraining
runs on a CPU (SPES): ``small-moe`` (4 layers, hidden 128, 16 experts of intermediate 128,
top-2; 3.4 M parameters, 92 % of them in experts) for experiments, and ``moe-300m`` (12
layers, hidden 512, 16 experts of intermediate 1024, top-2; 315 M parameters), sized to show
per-node training memory on this class of machine. OLMoE-1B-7B itself is
``allenai/OLMoE-1B-7B-0924`` on the hub (64 experts, top-8).

All use the byte tokenizer of :mod:`decent.models.byte_tokenizer` (vocabulary 260).
Initialisation draws from torch's global generator only, so ``torch.manual_seed(s)`` before
:func:`build_tiny` gives the same weights every time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from decent.models.byte_tokenizer import BOS_ID, EOS_ID, PAD_ID, VOCAB_SIZE

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel

TINY_ALIASES = ("tiny-llama", "tiny-opt", "tiny-moe", "small-moe", "moe-300m")

_HIDDEN = 64
_LAYERS = 2
_HEADS = 4
_KV_HEADS = 2
_INTERMEDIATE = 128
_MAX_POSITIONS = 512  # plenty for test prompts; only OPT's learned position table grows with it
_EXPERTS = 4
_TOP_K = 2
_EXPERT_INTERMEDIATE = 64

# (hidden, layers, heads, kv heads, experts, expert intermediate) of the random MoE sizes;
# top-2 routing as OLMoE's ablations and SPES's models
_MOE_SHAPES = {
    "tiny-moe": (_HIDDEN, _LAYERS, _HEADS, _KV_HEADS, _EXPERTS, _EXPERT_INTERMEDIATE),
    "small-moe": (128, 4, 4, 2, 16, 128),
    "moe-300m": (512, 12, 8, 4, 16, 1024),
}

# What every tiny model shares, whatever its architecture: the offline tokenizer's
# vocabulary and special tokens, and the context length
_SHARED = {"vocab_size": VOCAB_SIZE, "max_position_embeddings": _MAX_POSITIONS,
           "pad_token_id": PAD_ID, "bos_token_id": BOS_ID, "eos_token_id": EOS_ID}


def tiny_config(alias: str) -> PretrainedConfig:
    """The transformers config of a tiny model alias (see the module docstring for shapes)."""
    if alias == "tiny-llama":
        from transformers import LlamaConfig

        return LlamaConfig(
            hidden_size=_HIDDEN,
            intermediate_size=_INTERMEDIATE,
            num_hidden_layers=_LAYERS,
            num_attention_heads=_HEADS,
            num_key_value_heads=_KV_HEADS,
            tie_word_embeddings=True,
            **_SHARED,
        )
    if alias == "tiny-opt":
        from transformers import OPTConfig

        return OPTConfig(
            hidden_size=_HIDDEN,
            word_embed_proj_dim=_HIDDEN,
            ffn_dim=_INTERMEDIATE,
            num_hidden_layers=_LAYERS,
            num_attention_heads=_HEADS,
            **_SHARED,
        )
    if alias in _MOE_SHAPES:
        from transformers import OlmoeConfig

        hidden, layers, heads, kv_heads, experts, inter = _MOE_SHAPES[alias]
        return OlmoeConfig(
            hidden_size=hidden,
            intermediate_size=inter,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            num_experts=experts,
            num_experts_per_tok=_TOP_K,
            **_SHARED,
        )
    raise KeyError(f"unknown tiny model {alias!r}; known: {', '.join(TINY_ALIASES)}")


def build_tiny(alias: str) -> PreTrainedModel:
    """A freshly initialised float32 tiny model, in eval mode like ``from_pretrained`` returns.

    The weights come from the global torch generator: seed it first for reproducible builds.
    """
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(tiny_config(alias), dtype=torch.float32)
    return model.eval()
