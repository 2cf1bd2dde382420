"""DSO's compression pieces: Top-K by an importance other than |x|, INT8 values on the kept
entries (wire size in closed form), activation sensitivity against a hand computation, and
the error-feedback invariant Σ decompressed + residual = Σ sent through the whole chain."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from decent.compression import TopKInt8Config, build_compressor
from decent.compression.error_feedback import ErrorFeedback
from decent.compression.topk import TopK, TopKInt8
from decent.core.messages import wire_size
from decent.models.sensitivity import activation_sensitivity


def test_topk_keeps_the_largest_importance_not_the_largest_magnitude():
    x = torch.tensor([5.0, -4.0, 3.0, -2.0, 1.0])
    importance = torch.tensor([0.1, 0.1, 1.0, 3.0, 0.1])  # favours entries 3 then 2
    payload = TopK(0.4).compress(x, importance)
    assert payload["idx"].tolist() == [3, 2]
    assert payload["val"].tolist() == [-2.0, 3.0]
    assert TopK(0.4).compress(x)["idx"].tolist() == [0, 1]


def test_topk_int8_quantises_the_kept_values_and_its_wire_size_is_the_closed_form():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1000, generator=g)
    compressor = build_compressor(TopKInt8Config(keep=0.01))
    assert isinstance(compressor, TopKInt8)
    payload = compressor.compress(x)
    k = 10
    assert wire_size(payload) == k * (4 + 1) + 4  # int32 index + int8 code, one fp32 scale
    dense = compressor.decompress(payload, x)
    kept = torch.topk(x.abs(), k).indices
    scale = float(x[kept].abs().max()) / 127
    np.testing.assert_allclose(dense[kept].numpy(), x[kept].numpy(), atol=scale / 2 + 1e-7)
    assert int((dense != 0).sum()) == k


def test_activation_sensitivity_is_the_mean_input_magnitude_per_column():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU(), torch.nn.Linear(2, 1))
    batches = [torch.tensor([[1.0, -2.0, 0.0]]), torch.tensor([[3.0, 0.0, -4.0],
                                                                [0.0, 2.0, 0.0]])]
    s = activation_sensitivity(model, batches, lambda m, b: m(b))
    np.testing.assert_allclose(s["0.weight"].numpy(), [[4 / 3, 4 / 3, 4 / 3]], rtol=1e-6)
    hidden = torch.relu(model[0](torch.cat(batches))).abs().mean(0)
    np.testing.assert_allclose(s["2.weight"].numpy(), hidden.detach().numpy()[None], rtol=1e-6)
    assert float(s["0.bias"]) == 1.0 and s["0.weight"].shape == (1, 3)


@pytest.mark.parametrize("keep", [0.01, 0.1])
def test_error_feedback_keeps_every_bit_of_signal_through_importance_topk_int8(keep):
    g = torch.Generator().manual_seed(1)
    feedback = ErrorFeedback(TopKInt8(keep))
    weights = {"w": torch.rand(1, 50, generator=g) + 0.5}
    sent = torch.zeros(20, 50, dtype=torch.float64)
    received = torch.zeros(20, 50, dtype=torch.float64)
    for _ in range(30):
        x = torch.randn(20, 50, generator=g)
        payload = feedback.compress({"w": x}, weights)["w"]
        sent += x.double()
        received += feedback.compressor.decompress(payload, x).double()
    # Σ D(p_t) + e_T = Σ x_t: nothing lost, only delayed
    np.testing.assert_allclose((received + feedback.memory["w"].double()).numpy(),
                               sent.numpy(), atol=1e-4)
