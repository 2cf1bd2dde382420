"""scikit-learn's ``digits``: 1 797 8×8 images of handwritten digits, shipped with
scikit-learn (no download), the platform's smallest real classification task."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from decent.core.errors import ConfigError
from decent.core.schema import at_least, in_range, one_of, positive, text
from decent.tasks.base import ClientData
from decent.tasks.file_cache import while_unchanged
from decent.tasks.labelled import LabelledTask
from decent.tasks.partition import PARTITIONS


@dataclass
class DigitsConfig:
    name: str = text("digits", nullable=False)
    # how the training set is split: iid, dirichlet (by label, alpha), shards
    partition: str = one_of(PARTITIONS, "iid")
    alpha: float = positive(0.5)  # Dirichlet concentration (partition=dirichlet)
    # partition=shards: McMahan's sorted-label shards per client
    shards_per_client: int = at_least(1, 2)
    # the share of the 1 797 images held out for testing
    test_fraction: float = in_range(0.2, 0, 1, lo_open=True, hi_open=True)


def read_digits() -> tuple[np.ndarray, np.ndarray]:
    """The 1 797 UCI digits as scikit-learn ships them (``load_digits``'s own file: 64 pixel
    columns, then the label), read with numpy. Importing ``sklearn.datasets`` would load
    scipy, pandas and pyarrow, ~200 MB in every process that builds this task."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("task.name", "digits needs scikit-learn (pip install scikit-learn)")
    path = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / \
        "digits.csv.gz"
    return _parsed(path)


@while_unchanged(maxsize=4)
def _parsed(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The table parsed once per process (~25 ms of CPU each time a run builds the task),
    handed out read-only: every caller shares these arrays."""
    table = np.loadtxt(path, delimiter=",")
    pixels, labels = table[:, :-1], table[:, -1].astype(int)
    pixels.flags.writeable = labels.flags.writeable = False
    return pixels, labels


class DigitsTask(LabelledTask):
    name = "digits"

    def __init__(self, cfg: DigitsConfig, seed: int, model_cfg: Any = None) -> None:
        self.cfg = cfg
        self.seed = seed
        pixels, labels = read_digits()
        x = (pixels / 16.0).astype(np.float32)  # pixel intensities are 0..16
        y = labels.astype(np.int64)
        order = np.random.default_rng(seed).permutation(len(y))
        n_test = round(cfg.test_fraction * len(y))
        test, train = order[:n_test], order[n_test:]
        self.x_train, self.y_train = torch.from_numpy(x[train]), torch.from_numpy(y[train])
        self.x_test, self.y_test = torch.from_numpy(x[test]), torch.from_numpy(y[test])

    def model_spec(self) -> dict[str, Any]:
        return {"input_dim": 64, "num_classes": 10}

    def public_data(self) -> ClientData:
        """The test split (held out of every shard)."""
        return ClientData(self.x_test, self.y_test)

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, device: torch.device) -> dict[str, float]:
        model.eval()
        logits = model(self.x_test.to(device))
        y = self.y_test.to(device)
        return {
            "accuracy": float((logits.argmax(-1) == y).float().mean()),
            "loss": float(F.cross_entropy(logits, y)),
        }
