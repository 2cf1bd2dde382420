"""The models ``decent run`` can name in ``model.name``."""

from __future__ import annotations

from decent.models.mlp import MLPConfig, build_mlp
from decent.platform.registry import Registry

MODELS = Registry("model")
MODELS.register("mlp", MLPConfig, build_mlp)
