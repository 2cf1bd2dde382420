"""Message compression: Top-K sparsification, INT8 quantisation, error feedback.

A compressor turns a tensor into the arrays that would really cross the network (a
dict of tensors at their wire dtypes), so the platform's wire-size rule counts exactly
those bytes: Top-K sends ``k`` int32 indices and ``k`` values, INT8 sends one byte per
entry plus a float32 scale. Compressors are registered in :data:`COMPRESSORS` (name →
config class + builder), so a user's module may add one.
"""

from decent.compression.base import CompressionConfig, Compressor
from decent.compression.error_feedback import ErrorFeedback
from decent.compression.registry import COMPRESSORS, build_compressor
from decent.compression.topk import SparseConfig, TopKConfig, TopKInt8Config

__all__ = [
    "COMPRESSORS",
    "CompressionConfig",
    "Compressor",
    "ErrorFeedback",
    "SparseConfig",
    "TopKConfig",
    "TopKInt8Config",
    "build_compressor",
]
