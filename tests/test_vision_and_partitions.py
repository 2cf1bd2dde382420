"""Partitions and the CIFAR-10 task (on a small CIFAR-format dataset written here)."""

import numpy as np
import pytest
import torch

from decent.backends.local import local_engine
from decent.core.errors import ConfigError
from decent.engine.config import from_dict
from decent.models.cnn import CNNConfig, build_cnn
from decent.tasks.partition import partition
from tests.helpers import save_fake_cifar, tiny

LABELS = np.repeat(np.arange(10), 30)  # 300 examples, 30 per class


@pytest.mark.parametrize("scheme", ["iid", "dirichlet", "shards"])
def test_partitions_are_disjoint_covering_and_seeded(scheme):
    parts = partition(LABELS, 6, scheme, alpha=0.3, seed=1)
    joined = np.sort(np.concatenate(parts))
    if scheme != "dirichlet":
        np.testing.assert_array_equal(joined, np.arange(len(LABELS)))
    assert len(np.unique(joined)) == len(joined)  # no example twice
    assert all(len(p) > 0 for p in parts)
    again = partition(LABELS, 6, scheme, alpha=0.3, seed=1)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))


def test_shards_give_few_classes_and_dirichlet_skews():
    shards = partition(LABELS, 10, "shards", alpha=0, seed=0, shards_per_client=2)
    assert max(len(np.unique(LABELS[p])) for p in shards) <= 2
    iid = partition(LABELS, 10, "iid", alpha=0, seed=0)
    skewed = partition(LABELS, 10, "dirichlet", alpha=0.1, seed=0)
    classes = [len(np.unique(LABELS[p])) for p in skewed]
    assert np.mean(classes) < np.mean([len(np.unique(LABELS[p])) for p in iid])


def test_partition_errors():
    with pytest.raises(ConfigError) as err:
        partition(LABELS, 4, "random", 0.5, 0)
    assert err.value.field == "task.partition"
    with pytest.raises(ConfigError) as err:
        partition(LABELS, 200, "shards", 0.5, 0, shards_per_client=2)
    assert err.value.field == "task.shards_per_client"


@pytest.fixture(scope="module")
def fake_cifar(tmp_path_factory):
    """60 train / 20 test random 32×32 RGB images in CIFAR-10's hub format."""
    pytest.importorskip("datasets")
    return save_fake_cifar(tmp_path_factory.mktemp("cifar") / "saved", 60, 20)


def test_cifar10_from_data_dir_trains_the_mcmahan_cnn(tmp_path, fake_cifar):
    cfg = from_dict(tiny(tmp_path, topology={"name": "ring", "n": 4},
                         task={"name": "cifar10", "data_dir": str(fake_cifar),
                               "partition": "shards"},
                         model={"name": "cnn"}))
    backend = local_engine(cfg)
    task = backend.group.task
    assert task.x_train.shape == (60, 3, 32, 32) and task.x_test.shape == (20, 3, 32, 32)
    assert abs(float(task.x_train.mean())) < 0.5  # normalised with CIFAR statistics
    stats, traffic = backend.run_round(0)
    assert set(stats) == {0, 1, 2, 3}
    d = sum(p.numel() for p in backend.group.base_model.parameters())
    assert traffic.bytes == 2 * 4 * 4 * d
    assert 0 <= backend.evaluate(per_client=False)["gmp_accuracy"] <= 1


def test_mcmahan_cnn_shape():
    model = build_cnn(CNNConfig(), {"image_shape": (3, 32, 32), "num_classes": 10})
    # 5·5·3·32+32 + 5·5·32·64+64 + 8·8·64·512+512 + 512·10+10: the paper's ~2.1M parameters
    assert sum(p.numel() for p in model.parameters()) == 2_156_490
    assert model(torch.zeros(2, 3, 32, 32)).shape == (2, 10)


def test_cifar10_offline_without_data_dir_is_a_clear_error(tmp_path):
    cfg = from_dict(tiny(tmp_path, task={"name": "cifar10"}, model={"name": "cnn"}))
    with pytest.raises(ConfigError) as err:
        local_engine(cfg)
    assert err.value.field == "task.source"
    assert "task.data_dir" in str(err.value)
