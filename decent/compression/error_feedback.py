"""Error feedback (Seide et al., 2014; Karimireddy et al., 2019): a residual memory per
tensor so that what compression drops now is sent later.

    p = C(x + e);   e ← (x + e) − D(p)

Over any number of messages Σ D(p_t) + e_T = Σ x_t exactly (up to float rounding), so a
biased compressor such as Top-K loses no signal in the long run.
"""

from __future__ import annotations

import torch

from decent.compression.base import Compressor, Payload
from decent.core.storable import storable


@storable(fields=('compressor', 'memory'))
class ErrorFeedback:
    def __init__(self, compressor: Compressor) -> None:
        self.compressor = compressor
        self.memory: dict[str, torch.Tensor] = {}

    @torch.no_grad()
    def compress(self, tensors: dict[str, torch.Tensor],
                 weights: dict[str, torch.Tensor] | None = None) -> dict[str, Payload]:
        """The payloads of ``tensors``; with ``weights`` (a Top-K compressor), entries are
        kept by |x + e| ⊙ weight rather than by |x + e| (a tensor without one: by |x + e|)."""
        out = {}
        for name, x in tensors.items():
            corrected = x + self.memory[name] if name in self.memory else x.clone()
            if weights is not None and name in weights:
                payload = self.compressor.compress(  # type: ignore[call-arg]
                    corrected, corrected.abs() * weights[name])
            else:
                payload = self.compressor.compress(corrected)
            self.memory[name] = corrected - self.compressor.decompress(payload, corrected)
            out[name] = payload
        return out
