"""Top-K sparsification (Stich et al., 2018; CHOCO-SGD's compressor).

A tensor keeps its ``k = max(1, ceil(keep · numel))`` entries of largest magnitude. On the
wire: ``k`` int32 indices (into the flattened tensor) and ``k`` values,
``k · (4 + value bytes)`` bytes. ``scope`` says what a tensor is when a strategy sends a
model's worth: ``per_tensor``, each parameter tensor on its own (every layer keeps sending
something); ``global``, the whole update as one vector g ∈ R^d (DSO's Algorithm 1: TopK
over g, so the layers that matter most may keep more than their share) — see
:mod:`decent.compression.tree`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from decent.compression.base import VALUE_DTYPES, CompressionConfig, Payload
from decent.compression.quantize import Int8
from decent.core.schema import in_range, one_of
from decent.core.storable import storable

PER_TENSOR, GLOBAL = "per_tensor", "global"
SCOPES = (PER_TENSOR, GLOBAL)


@dataclass
class SparseConfig(CompressionConfig):
    """Both Top-K compressors' fields (CHOCO-SGD's paper setting for ``keep`` is 1%, i.e.
    99% sparsity)."""

    # the fraction of each tensor's entries kept
    keep: float = in_range(0.01, 0, 1, lo_open=True)
    # what Top-K ranks over when a whole update is sent: each parameter tensor on its own
    # (per_tensor), or all of them as one vector (global; DSO and FedAvg's uploads)
    scope: str = one_of(SCOPES, "per_tensor")


@dataclass
class TopKInt8Config(SparseConfig):
    """``topk_int8``: Top-K whose kept values travel as INT8."""

    name: str = "topk_int8"


@dataclass
class TopKConfig(SparseConfig):
    """``topk``: the kept values travel at ``value_dtype`` (indices are always int32)."""

    name: str = "topk"
    value_dtype: str = one_of(tuple(VALUE_DTYPES), "float32")  # the kept values' dtype


def kept(numel: int, keep: float) -> int:
    return max(1, math.ceil(keep * numel))


@storable(fields=('keep', 'value_dtype', 'scope'))
class TopK:
    scope: str = PER_TENSOR  # also what a compressor stored before there was a choice

    def __init__(self, keep: float, value_dtype: torch.dtype = torch.float32,
                 scope: str = PER_TENSOR) -> None:
        self.keep = keep
        self.value_dtype = value_dtype
        self.scope = scope

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


@storable(fields=('keep', 'value_dtype', 'scope'))
class TopKInt8(TopK):
    """Top-K whose kept values travel as INT8 with one float32 scale (DSO's Top-1 % +
    INT8): ``k · (4 + 1) + 4`` bytes."""

    def __init__(self, keep: float, scope: str = PER_TENSOR) -> None:
        super().__init__(keep, torch.float32, scope)

    def compress(self, x: torch.Tensor, importance: torch.Tensor | None = None) -> Payload:
        sparse = super().compress(x, importance)
        return {"idx": sparse["idx"], **Int8().compress(sparse["val"])}

    def decompress(self, payload: Payload, like: torch.Tensor) -> torch.Tensor:
        values = Int8().decompress(payload, payload["q"].float())
        return super().decompress({"idx": payload["idx"], "val": values}, like)


def build_topk(cfg: TopKConfig) -> TopK:
    return TopK(cfg.keep, VALUE_DTYPES[cfg.value_dtype], cfg.scope)


def build_topk_int8(cfg: TopKInt8Config) -> TopKInt8:
    return TopKInt8(cfg.keep, cfg.scope)
