"""CIFAR-10 image classification (the segmented-gossip paper's task), through
Hugging Face ``datasets``.

Users with a network get ``uoft-cs/cifar10`` from the hub. Offline, ``task.data_dir``
names either a dataset saved with ``DatasetDict.save_to_disk`` or a folder of the hub's
parquet files (``train-*.parquet``, ``test-*.parquet``); either has an image column
(``img``) and a ``label`` column.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from decent.core.errors import ConfigError
from decent.core.schema import at_least, one_of, positive, text
from decent.tasks.labelled import LabelledTask
from decent.tasks.partition import PARTITIONS

HUB_NAME = "uoft-cs/cifar10"
# Per-channel statistics of the CIFAR-10 training set, the usual normalisation.
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)


@dataclass
class Cifar10Config:
    name: str = text("cifar10", nullable=False)
    # auto: data_dir when set, else the hub (uoft-cs/cifar10)
    source: str = one_of(("auto", "hub", "local"), "auto")
    data_dir: str | None = text()  # a saved DatasetDict or the hub's parquet files (offline)
    # how the training set is split: iid, dirichlet (by label, alpha), shards
    partition: str = one_of(PARTITIONS, "iid")
    alpha: float = positive(0.5)  # Dirichlet concentration (partition=dirichlet)
    # partition=shards: McMahan's sorted-label shards per client
    shards_per_client: int = at_least(1, 2)
    num_train: int | None = at_least(1, None, nullable=True)  # None: all 50 000
    num_test: int | None = at_least(1, None, nullable=True)  # None: all 10 000
    eval_batch_size: int = at_least(1, 500)  # images per evaluation batch


def load_splits(cfg: Cifar10Config) -> Any:
    """The DatasetDict with ``train`` and ``test`` splits, from data_dir or the hub."""
    import datasets

    if cfg.data_dir is not None:
        root = Path(cfg.data_dir)
        if (root / "dataset_dict.json").is_file():
            return datasets.load_from_disk(str(root))
        files = {s: sorted(str(p) for p in root.rglob(f"{s}-*.parquet")) for s in ("train", "test")}
        if files["train"] and files["test"]:
            return datasets.load_dataset("parquet", data_files=files)
        raise ConfigError("task.data_dir", f"{root} holds neither a saved DatasetDict nor "
                          "train-*.parquet and test-*.parquet files of CIFAR-10")
    if cfg.source == "local":
        raise ConfigError("task.data_dir", "task.source=local needs task.data_dir")
    try:
        return datasets.load_dataset(HUB_NAME)
    except Exception as exc:  # offline, or the hub refused: say what to do instead
        reason = str(exc).splitlines()[0][:120]
        raise ConfigError("task.source", f"could not load {HUB_NAME} from the Hugging Face "
                          f"hub ({reason}); with no network set task.data_dir to a saved "
                          "copy") from None


def to_tensors(split: Any, limit: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    image_col = "img" if "img" in split.column_names else "image"
    if limit is not None:
        split = split.select(range(min(limit, len(split))))
    images = np.stack([np.asarray(im.convert("RGB"), dtype=np.float32) for im in split[image_col]])
    x = torch.from_numpy(images).permute(0, 3, 1, 2) / 255.0
    x = (x - torch.tensor(MEAN)[:, None, None]) / torch.tensor(STD)[:, None, None]
    return x.contiguous(), torch.tensor(split["label"], dtype=torch.long)


class Cifar10Task(LabelledTask):
    name = "cifar10"

    def __init__(self, cfg: Cifar10Config, seed: int, model_cfg: Any = None) -> None:
        self.cfg = cfg
        self.seed = seed
        splits = load_splits(cfg)
        self.x_train, self.y_train = to_tensors(splits["train"], cfg.num_train)
        self.x_test, self.y_test = to_tensors(splits["test"], cfg.num_test)

    def model_spec(self) -> dict[str, Any]:
        return {"image_shape": tuple(self.x_train.shape[1:]), "num_classes": 10}

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, device: torch.device) -> dict[str, float]:
        model.eval()
        correct, loss_sum = 0, 0.0
        for start in range(0, len(self.y_test), self.cfg.eval_batch_size):
            x = self.x_test[start: start + self.cfg.eval_batch_size].to(device)
            y = self.y_test[start: start + self.cfg.eval_batch_size].to(device)
            logits = model(x)
            correct += int((logits.argmax(-1) == y).sum())
            loss_sum += float(F.cross_entropy(logits, y, reduction="sum"))
        n = len(self.y_test)
        return {"accuracy": correct / n, "loss": loss_sum / n}


def write_random_cifar10(path: Path, train: int, test: int, seed: int = 0) -> Path:
    """``train`` / ``test`` random 32×32 RGB images (labels cycling 0..9) saved in
    CIFAR-10's hub format with ``datasets`` at ``path``: what ``task.data_dir`` reads, for
    timing a CIFAR-shaped workload or testing without the real images."""
    import datasets
    from PIL import Image

    rng = np.random.default_rng(seed)

    def split(n: int) -> Any:
        images = [Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8))
                  for _ in range(n)]
        return datasets.Dataset.from_dict(
            {"img": images, "label": [i % 10 for i in range(n)]},
            features=datasets.Features({"img": datasets.Image(),
                                        "label": datasets.ClassLabel(num_classes=10)}))

    datasets.DatasetDict({"train": split(train), "test": split(test)}).save_to_disk(str(path))
    return path
