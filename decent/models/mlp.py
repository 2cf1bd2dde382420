"""A small multi-layer perceptron for tabular/pixel tasks such as ``digits``."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import torch
from torch import nn

from decent.platform.errors import ConfigError


@dataclass
class MLPConfig:
    name: str = "mlp"
    hidden: list[int] = field(default_factory=lambda: [64])

    def validate(self, prefix: str = "model") -> None:
        if any(h < 1 for h in self.hidden):
            raise ConfigError(f"{prefix}.hidden", f"layer widths must be ≥ 1 (got {self.hidden})")


def build_mlp(cfg: MLPConfig, spec: dict[str, Any]) -> nn.Module:
    widths = [spec["input_dim"], *cfg.hidden]
    layers: list[nn.Module] = []
    for a, b in pairwise(widths):
        layers += [nn.Linear(a, b), nn.ReLU()]
    layers.append(nn.Linear(widths[-1], spec["num_classes"]))
    return nn.Sequential(*layers)


def num_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
