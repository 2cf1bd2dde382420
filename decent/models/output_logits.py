"""The output-logit z-loss of language-model pretraining, read off any forward pass.

PaLM (Chowdhery et al., 2022, §5) adds 1e-4 · log²Z to the cross-entropy, Z the softmax
normaliser of the output logits, so that log Z stays near 0 and training stays stable in
low precision. The term here is the mean of logsumexp(logits)² over the positions that
predict a token; in a causal language model that is every position but the last.

What SPES's authors' trainer applies (zjr2000/SPES): their released configs write
``softmax_auxiliary_loss: true`` and ``auxiliary_loss_multiplier: 1e-5``
(``configs/spes_experiments/spes_moe_1b_slimpajama_100b_tokens_bsz256_4nodes/node_0.yaml``
L53–L55), but the multiplier is never read: ``spes/train.py`` L792–L793 calls the loss
function without ``z_loss_multiplier``, so the default of both loss functions applies,
1e-4 (``cross_entropy_loss`` L157, ``fused_loss_fn`` L189). With ``fused_loss: true`` (their
configs) flash-attn's fused cross-entropy gets ``lse_square_scale=1e-4`` (L204) and folds
1e-4 · log²Z into each token's loss; the z-loss it also returns is marked
non-differentiable, so adding it again (L817) changes the logged loss, not the gradient.
The term they minimise is therefore 1e-4 · log²Z summed over the positions that predict a
token and divided by the tokens of the batch (L836), the same divisor as their
cross-entropy: its weight relative to the cross-entropy is that of 1e-4 · the mean here
beside a mean cross-entropy. SPES's ``logit_z_loss`` default is that 1e-4.

:class:`OutputLogits` collects the logits with a forward hook on the model's output
embedding (the LM head), so the task's own loss needs no change.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

import torch
from torch import nn


class OutputLogits:
    """``with OutputLogits(model) as out: model(...)`` — ``out.z_loss()`` is then the mean
    of log²Z over the positions of that forward that predict a next token."""

    def __init__(self, model: nn.Module) -> None:
        find = getattr(model, "get_output_embeddings", None)
        self._head: nn.Module | None = find() if callable(find) else None
        self._logits: torch.Tensor | None = None
        self._handle: Any = None

    @property
    def found(self) -> bool:
        """Whether the model has an output embedding (a classifier or CNN has none)."""
        return self._head is not None

    def __enter__(self) -> OutputLogits:
        self._logits = None

        def keep(_module: nn.Module, _inputs: Any, output: torch.Tensor) -> None:
            self._logits = output

        if self._head is not None:
            self._handle = self._head.register_forward_hook(keep)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def z_loss(self) -> torch.Tensor:
        """mean over batch × (positions − 1) of logsumexp(logits)²."""
        assert self._logits is not None, "no forward pass ran inside the block"
        logits = self._logits[:, :-1] if self._logits.dim() == 3 else self._logits
        # at least float32 (a bf16 head's log Z squared loses digits); float64 stays
        wide = logits.to(torch.promote_types(logits.dtype, torch.float32))
        return torch.logsumexp(wide, dim=-1).square().mean()
