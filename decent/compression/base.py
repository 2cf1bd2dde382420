"""The compressor contract, the fields every compression section has, and the identity
compressor. Each compressor's own module declares its config's extra fields; the
registry (:mod:`decent.compression.registry`) pairs them with their builders, so nothing
here imports a concrete compressor."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from decent.core.schema import text
from decent.core.storable import storable

VALUE_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

# A compressed tensor as it travels: named arrays at their wire dtypes.
Payload = dict[str, torch.Tensor]


@dataclass
class CompressionConfig:
    """How a strategy compresses what it sends (``strategy.compression``): the fields of
    every compressor (``identity`` and ``int8`` have no others). ``error_feedback`` adds
    a residual memory where the strategy supports it (compressed pseudo-gradients: the
    part a message leaves out is sent later)."""

    # the compressor: identity (dense), topk, int8, topk_int8, or one a module of
    # `imports` registers (`decent config schema compression` lists them)
    name: str = text("identity", nullable=False)
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
