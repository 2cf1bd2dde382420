"""Reading a causal LM's next-token logits cheaply: label words, last tokens, perplexity.

Prompted classification reads the class off the logits of a few label words at each row's
last real token (:func:`label_word_logits`); computing only those rows of the output
projection avoids the full-vocabulary head, the expensive part of a small model on a CPU.
:func:`last_token_logits` is the full-forward reference it must match.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

# output heads whose forward a hook adds to (SubCGE's low-rank term on a head tied to the
# embeddings): for them the weight's rows alone are not the map, the forward is
OUTPUT_HOOKED: weakref.WeakSet[nn.Module] = weakref.WeakSet()


def _unwrap(model: nn.Module) -> nn.Module:
    """The ``*ForCausalLM`` model inside a peft wrapper (itself otherwise)."""
    get_base_model = getattr(model, "get_base_model", None)
    return get_base_model() if callable(get_base_model) else model


def backbone(model: nn.Module) -> nn.Module:
    """The decoder without the LM head (``LlamaModel``, ``OPTModel``, ``OlmoeModel``, ...).

    transformers' ``base_model`` property names it for every ``*ForCausalLM``; ``.model`` is
    the fallback for classes that lack it.
    """
    lm = _unwrap(model)
    inner = getattr(lm, "base_model", None)
    if isinstance(inner, nn.Module) and inner is not lm:
        return inner
    inner = getattr(lm, "model", None)
    if isinstance(inner, nn.Module):
        return inner
    raise TypeError(f"cannot find the decoder inside {type(lm).__name__}")


def last_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Index of each row's last real (mask 1) token; right or left padding alike."""
    steps = torch.arange(1, attention_mask.shape[1] + 1, device=attention_mask.device)
    return (attention_mask.to(steps.dtype) * steps).argmax(dim=1)


def label_word_logits(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    token_ids: torch.Tensor,
) -> torch.Tensor:
    """Next-token logits at each row's last real token, for ``token_ids`` only (batch × k).

    Classification by label words needs k logits, not the whole vocabulary. For SmolLM2 the
    full head is 576 × 49 152 ≈ 28 M multiply-adds per position, a fifth of the model's ~134 M,
    and its batch × length × 49 152 output is the largest activation (80 MB in float32 for
    8 × 51 tokens); here it shrinks to one position per row and k columns.
    This runs the decoder, keeps one hidden state per row and multiplies it by the k rows of the
    output embedding (plus their bias, if the head has one). OPT's ``project_out`` is part of
    its decoder, so the hidden state is already in the head's input space. Router outputs of
    MoE models are not requested. Gradients flow as through the full forward.
    """
    out = backbone(model)(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
    hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
    rows = torch.arange(hidden.shape[0], device=hidden.device)
    h = hidden[rows, last_positions(attention_mask)]
    head = _unwrap(model).get_output_embeddings()
    # LoRA on the head itself, or a hook adding to its output: its weight alone is not the
    # map (one position per row through the whole head: a small part of the forward)
    if hasattr(head, "base_layer") or head in OUTPUT_HOOKED:
        return head(h)[:, token_ids]
    bias = head.bias[token_ids] if getattr(head, "bias", None) is not None else None
    return nn.functional.linear(h, head.weight[token_ids], bias)


def last_token_logits(
    model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> torch.Tensor:
    """Full-vocabulary logits at each row's last real token (batch × vocab), via the full
    forward; the reference that :func:`label_word_logits` must match."""
    out = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
    rows = torch.arange(out.logits.shape[0], device=out.logits.device)
    return out.logits[rows, last_positions(attention_mask)]


def perplexity(model: nn.Module, tokenizer: PreTrainedTokenizerBase, text: str) -> float:
    """exp(mean next-token cross-entropy) of ``text`` (one sequence, no special tokens added
    beyond what the tokenizer adds itself)."""
    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model(input_ids=ids, labels=ids, use_cache=False)
    return float(torch.exp(out.loss.float()))
