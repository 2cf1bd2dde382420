"""Message compression: Top-K sparsification, INT8 quantisation, error feedback.

A compressor turns a tensor into the arrays that would really cross the network (a
dict of tensors at their wire dtypes), so the platform's wire-size rule counts exactly
those bytes: Top-K sends ``k`` int32 indices and ``k`` values, INT8 sends one byte per
entry plus a float32 scale.
"""

from decent.compression.base import (
    COMPRESSORS,
    CompressionConfig,
    Compressor,
    build_compressor,
)
from decent.compression.error_feedback import ErrorFeedback

__all__ = [
    "COMPRESSORS",
    "CompressionConfig",
    "Compressor",
    "ErrorFeedback",
    "build_compressor",
]
