"""The compressor contract, its config section and the identity compressor."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from decent.core.schema import in_range, one_of
from decent.core.storable import storable

COMPRESSORS = ("identity", "topk", "int8", "topk_int8")
VALUE_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

# A compressed tensor as it travels: named arrays at their wire dtypes.
Payload = dict[str, torch.Tensor]


@dataclass
class CompressionConfig:
    """How a strategy compresses what it sends (``strategy.compression``).

    ``keep`` is Top-K's kept fraction per tensor (CHOCO-SGD's paper setting is 1%, i.e.
    99% sparsity); ``value_dtype`` is the dtype Top-K's values travel in (indices are
    always int32); ``error_feedback`` adds a residual memory where the strategy supports
    it (compressed pseudo-gradients: the part a message leaves out is sent later)."""

    name: str = one_of(COMPRESSORS, "identity")  # identity (dense), topk, int8, or topk_int8
    # Top-K: the fraction of each tensor's entries kept
    keep: float = in_range(0.01, 0, 1, lo_open=True)
    # Top-K: the dtype the kept values travel in
    value_dtype: str = one_of(tuple(VALUE_DTYPES), "float32")
    error_feedback: bool = False  # add what compression dropped to the next message


class Compressor(Protocol):
    def compress(self, x: torch.Tensor) -> Payload:
        """The wire form of ``x``."""

    def decompress(self, payload: Payload, like: torch.Tensor) -> torch.Tensor:
        """The dense tensor the receiver reconstructs (shape and dtype of ``like``)."""


@storable(fields=())
class Identity:
    """No compression: the tensor itself (``4·numel`` bytes in float32)."""

    def compress(self, x: torch.Tensor) -> Payload:
        return {"dense": x.detach().clone()}

    def decompress(self, payload: Payload, like: torch.Tensor) -> torch.Tensor:
        return payload["dense"].to(like.dtype).reshape(like.shape)


def build_compressor(cfg: CompressionConfig) -> Compressor:
    from decent.compression.quantize import Int8
    from decent.compression.topk import TopK, TopKInt8

    if cfg.name == "topk":
        return TopK(cfg.keep, VALUE_DTYPES[cfg.value_dtype])
    if cfg.name == "int8":
        return Int8()
    if cfg.name == "topk_int8":
        return TopKInt8(cfg.keep)
    return Identity()
