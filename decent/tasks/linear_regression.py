"""Synthetic least squares: the quadratic objectives optimisation analyses are stated for.

Every client holds ``samples_per_client`` points (x, y) with y = x·w* + noise and one shared
w*; client i's features are x ~ N(0, diag(s_i²)) with its own scales
s_i = exp(heterogeneity · z_i), z_i ~ N(0, I), so each client's f_i has its own curvature
and, with noise = 0, all f_i share the minimiser w* (the interpolation regime, in which
decentralized methods reach exact consensus and their rates are easiest to compare).
Use ``model: {name: mlp, hidden: []}`` for a linear model. Nothing is downloaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from decent.core.schema import at_least, text
from decent.tasks.base import ClientData, Task


@dataclass
class LinearRegressionConfig:
    name: str = text("linear_regression", nullable=False)
    dim: int = at_least(1, 20)  # features per example (the dimension of w*)
    samples_per_client: int = at_least(1, 32)  # training examples per client
    # spread of the client-specific feature scales (0: identical clients)
    heterogeneity: float = at_least(0, 0.5)
    noise: float = at_least(0, 0.0)  # standard deviation of the label noise
    num_test: int = at_least(1, 512)  # test examples


class LinearRegressionTask(Task):
    METRICS = ("loss",)
    name = "linear_regression"

    def __init__(self, cfg: LinearRegressionConfig, seed: int, model_cfg: Any = None) -> None:
        self.cfg = cfg
        self.seed = seed
        rng = np.random.default_rng([seed, 0])
        self.w_star = rng.normal(size=cfg.dim)
        x = rng.normal(size=(cfg.num_test, cfg.dim))
        self.x_test = torch.tensor(x, dtype=torch.float32)
        self.y_test = torch.tensor(x @ self.w_star, dtype=torch.float32)

    def model_spec(self) -> dict[str, Any]:
        return {"input_dim": self.cfg.dim, "num_classes": 1}

    def client_data(self, holders: list[int], device: torch.device) -> dict[int, ClientData]:
        cfg = self.cfg
        out = {}
        for rank, cid in enumerate(holders):
            rng = np.random.default_rng([self.seed, 1, rank])
            scales = np.exp(cfg.heterogeneity * rng.normal(size=cfg.dim))
            x = rng.normal(size=(cfg.samples_per_client, cfg.dim)) * scales
            y = x @ self.w_star + cfg.noise * rng.normal(size=cfg.samples_per_client)
            out[cid] = ClientData(torch.tensor(x, dtype=torch.float32, device=device),
                                  torch.tensor(y, dtype=torch.float32, device=device))
        return out

    def loss(self, model: torch.nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        x, y = batch
        return F.mse_loss(model(x).squeeze(-1), y)

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, device: torch.device) -> dict[str, float]:
        model.eval()
        pred = model(self.x_test.to(device)).squeeze(-1)
        return {"loss": float(F.mse_loss(pred, self.y_test.to(device)))}
