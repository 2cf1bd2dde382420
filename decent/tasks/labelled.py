"""What the image-classification tasks (CIFAR-10, digits) share: a training set held whole
as ``(x, y)`` tensors, split across clients by label, and trained with cross-entropy."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from decent.tasks.base import ClientData, Task
from decent.tasks.partition import partition


class LabelledTask(Task):
    """A classification task whose subclass sets ``x_train`` / ``y_train`` (CPU tensors,
    ``y`` int64 class ids) and a ``cfg`` with ``partition``, ``alpha`` and
    ``shards_per_client``; evaluation stays its own (one batch or several)."""

    METRICS = ("accuracy", "loss")
    cfg: Any
    seed: int
    x_train: torch.Tensor
    y_train: torch.Tensor

    def client_data(self, holders: list[int], device: torch.device) -> dict[int, ClientData]:
        parts = partition(self.y_train.numpy(), len(holders), self.cfg.partition,
                          self.cfg.alpha, self.seed, self.cfg.shards_per_client)
        return {cid: ClientData(self.x_train[torch.from_numpy(p)].to(device),
                                self.y_train[torch.from_numpy(p)].to(device))
                for cid, p in zip(holders, parts, strict=True)}

    def loss(self, model: torch.nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(model(x), y)
