"""The CIFAR-10 CNN of McMahan et al. (2017, "Communication-Efficient Learning of Deep
Networks from Decentralized Data"), used by the segmented-gossip paper: two 5×5
convolutions (32 and 64 channels), each followed by 2×2 max pooling, a 512-unit fully
connected layer with ReLU, and a linear classifier."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from decent.core.schema import at_least, text


@dataclass
class CNNConfig:
    name: str = text("cnn", nullable=False)
    channels1: int = at_least(1, 32)  # output channels of the first 5×5 convolution
    channels2: int = at_least(1, 64)  # output channels of the second 5×5 convolution
    hidden: int = at_least(1, 512)  # units of the fully connected layer


def build_cnn(cfg: CNNConfig, spec: dict[str, Any]) -> nn.Module:
    channels, size, _ = spec["image_shape"]
    side = size // 4  # two 2×2 poolings; 'same' padding keeps the size between them
    return nn.Sequential(
        nn.Conv2d(channels, cfg.channels1, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(cfg.channels1, cfg.channels2, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(cfg.channels2 * side * side, cfg.hidden), nn.ReLU(),
        nn.Linear(cfg.hidden, spec["num_classes"]),
    )
