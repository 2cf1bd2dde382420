import numpy as np
import pytest
import torch

from decent.core.errors import StrategyError
from decent.core.messages import Declared, Scalar, Seed, wire_size


@pytest.mark.parametrize(
    ("dtype", "size"),
    [(torch.float32, 4), (torch.bfloat16, 2), (torch.float16, 2), (torch.int8, 1),
     (torch.int64, 8)],
)
def test_tensor_bytes_follow_dtype(dtype, size):
    assert wire_size(torch.zeros(3, 7, dtype=dtype)) == 21 * size


def test_scalars_seeds_and_containers():
    assert wire_size(Seed(123)) == 8
    assert wire_size(Scalar(0.5)) == 4
    # a SeedFlood message: seed + coefficient = 12 bytes
    assert wire_size((Seed(1), Scalar(2.0))) == 12
    payload = {"w": torch.zeros(10), "b": np.zeros(3, dtype=np.float16), "s": [Seed(0)]}
    assert wire_size(payload) == 40 + 6 + 8
    assert wire_size(None) == 0


def test_declared_size_wins_over_dense_form():
    dense = torch.zeros(1000)
    assert wire_size(Declared(dense, nbytes=80)) == 80


@pytest.mark.parametrize("bad", [3, 2.5, "text"])
def test_untyped_leaves_are_refused(bad):
    with pytest.raises(StrategyError, match="no wire size"):
        wire_size({"x": bad})
