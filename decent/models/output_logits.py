"""The output-logit z-loss of language-model pretraining, read off any forward pass.

PaLM (Chowdhery et al., 2022, §5) adds 1e-4 · log²Z to the cross-entropy, Z the softmax
normaliser of the output logits, so that log Z stays near 0 and training stays stable in
low precision; SPES's released configs use it with 1e-5 (``softmax_auxiliary_loss: true``,
``auxiliary_loss_multiplier: 1e-5``). Their loss (zjr2000/SPES, ``spes/train.py``,
``cross_entropy_loss``) is the mean of logsumexp(logits)² over the positions that predict a
token; in a causal language model that is every position but the last.

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
        return torch.logsumexp(logits.float(), dim=-1).square().mean()
