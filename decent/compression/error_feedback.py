"""Error feedback (Seide et al., 2014; Karimireddy et al., 2019): a residual memory per
tensor so that what compression drops now is sent later.

    p = C(x + e);   e ← (x + e) − D(p)

Over any number of messages Σ D(p_t) + e_T = Σ x_t exactly (up to float rounding), so a
biased compressor such as Top-K loses no signal in the long run.
"""

from __future__ import annotations

import torch

from decent.compression.base import Compressor, Payload
from decent.compression.tree import compress_tree, decompress_tree
from decent.core.storable import storable


@storable(fields=('compressor', 'memory'))
class ErrorFeedback:
    """A compressor with a residual memory per tensor: :meth:`compress` sends
    C(x + e) and keeps e ← (x + e) − D(C(x + e)). Keep one in the client's ``State``."""

    def __init__(self, compressor: Compressor) -> None:
        self.compressor = compressor
        self.memory: dict[str, torch.Tensor] = {}

    @torch.no_grad()
    def compress(self, tensors: dict[str, torch.Tensor],
                 weights: dict[str, torch.Tensor] | None = None) -> dict[str, Payload]:
        """The payloads of ``tensors`` (at the compressor's scope,
        :mod:`decent.compression.tree`); with ``weights`` (a Top-K compressor), entries are
        kept by |x + e| ⊙ weight rather than by |x + e| (a tensor without one: by |x + e|)."""
        corrected = {name: x + self.memory[name] if name in self.memory else x.clone()
                     for name, x in tensors.items()}
        importance = None if weights is None else \
            {name: corrected[name].abs() * weights[name] for name in corrected if name in weights}
        out = compress_tree(self.compressor, corrected, importance)
        sent = decompress_tree(self.compressor, out, corrected)
        for name, x in corrected.items():
            self.memory[name] = x - sent[name]
        return out
