"""A small multi-layer perceptron for tabular/pixel tasks such as ``digits``."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import torch
from torch import nn

from decent.core.schema import at_least, text


@dataclass
class MLPConfig:
    name: str = text("mlp", nullable=False)
    hidden: list[int] = at_least(1, [64], each=True)  # widths of the hidden layers


def build_mlp(cfg: MLPConfig, spec: dict[str, Any]) -> nn.Module:
    widths = [spec["input_dim"], *cfg.hidden]
    layers: list[nn.Module] = []
    for a, b in pairwise(widths):
        layers += [nn.Linear(a, b), nn.ReLU()]
    layers.append(nn.Linear(widths[-1], spec["num_classes"]))
    return nn.Sequential(*layers)


def num_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
