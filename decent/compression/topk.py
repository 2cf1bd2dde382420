"""Top-K sparsification (Stich et al., 2018; CHOCO-SGD's compressor).

Each tensor keeps its ``k = max(1, ceil(keep · numel))`` entries of largest magnitude —
per tensor rather than over the whole model, so every layer keeps sending something and
no global sort over d entries is needed. On the wire: ``k`` int32 indices (into the
flattened tensor) and ``k`` values, ``k · (4 + value bytes)`` bytes.
"""

from __future__ import annotations

import math

import torch

from decent.compression.base import Payload
from decent.core.storable import storable


def kept(numel: int, keep: float) -> int:
    return max(1, math.ceil(keep * numel))


@storable(fields=('keep', 'value_dtype'))
class TopK:
    def __init__(self, keep: float, value_dtype: torch.dtype = torch.float32) -> None:
        self.keep = keep
        self.value_dtype = value_dtype

    def compress(self, x: torch.Tensor, importance: torch.Tensor | None = None) -> Payload:
        """Keep the k entries of largest ``importance`` (default: |x|; any tensor that
        broadcasts to ``x``, e.g. DSO's |x| ⊙ sensitivity)."""
        flat = x.detach().reshape(-1)
        k = kept(flat.numel(), self.keep)
        score = flat.abs() if importance is None else \
            importance.detach().expand_as(x).reshape(-1)
        # sorted=True fixes the order of ties the same way on every run and backend
        idx = torch.topk(score, k, sorted=True).indices
        return {"idx": idx.to(torch.int32), "val": flat[idx].to(self.value_dtype)}

    def decompress(self, payload: Payload, like: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(like.numel(), dtype=like.dtype, device=like.device)
        out[payload["idx"].long()] = payload["val"].to(like.dtype)
        return out.reshape(like.shape)


@storable(fields=('keep', 'value_dtype'))
class TopKInt8(TopK):
    """Top-K whose kept values travel as INT8 with one float32 scale (DSO's Top-1 % +
    INT8): ``k · (4 + 1) + 4`` bytes."""

    def __init__(self, keep: float) -> None:
        super().__init__(keep, torch.float32)

    def compress(self, x: torch.Tensor, importance: torch.Tensor | None = None) -> Payload:
        from decent.compression.quantize import Int8

        sparse = super().compress(x, importance)
        return {"idx": sparse["idx"], **Int8().compress(sparse["val"])}

    def decompress(self, payload: Payload, like: torch.Tensor) -> torch.Tensor:
        from decent.compression.quantize import Int8

        values = Int8().decompress(payload, payload["q"].float())
        return super().decompress({"idx": payload["idx"], "val": values}, like)
