"""Every compressor by its ``strategy.compression.name``: :data:`COMPRESSORS`.

A compressor registers its config class (a :class:`CompressionConfig` subclass declaring
its own fields) with a builder ``build(cfg) -> Compressor``; a user's module (``imports:``)
adds one the same way. A class whose instances a client keeps (its compressor, held in
state and checkpoints) must be :func:`~decent.core.storable.storable`.
"""

from __future__ import annotations

from decent.compression.base import CompressionConfig, Compressor, Identity
from decent.compression.quantize import Int8
from decent.compression.topk import TopKConfig, TopKInt8Config, build_topk, build_topk_int8
from decent.core.registry import Registry

COMPRESSORS = Registry("compression")
COMPRESSORS.register("identity", CompressionConfig, lambda cfg: Identity())
COMPRESSORS.register("int8", CompressionConfig, lambda cfg: Int8())
COMPRESSORS.register("topk", TopKConfig, build_topk)
COMPRESSORS.register("topk_int8", TopKInt8Config, build_topk_int8)


def build_compressor(cfg: CompressionConfig | dict) -> Compressor:
    """The compressor ``cfg`` selects (a config, or a section such as ``{name: int8}``)."""
    if isinstance(cfg, dict):
        cfg = COMPRESSORS.config(cfg)
    return COMPRESSORS.entry(cfg.name).build(cfg)
