"""Top-K, INT8 and error feedback: what they keep, what they cost on the wire."""

import math

import pytest
import torch

from decent.compression import ErrorFeedback, build_compressor
from decent.compression.topk import TopK, kept
from decent.compression.tree import WHOLE, compress_tree, decompress_tree
from decent.core.errors import ConfigError
from decent.core.messages import wire_size
from decent.engine.config import from_dict
from tests.helpers import tiny


def test_topk_keeps_the_largest_entries_and_zeros_the_rest():
    x = torch.tensor([[0.1, -5.0, 0.3], [2.0, -0.2, 0.0]])
    comp = TopK(keep=2 / 6)
    payload = comp.compress(x)
    dense = comp.decompress(payload, x)
    assert torch.equal(dense, torch.tensor([[0.0, -5.0, 0.0], [2.0, 0.0, 0.0]]))


@pytest.mark.parametrize(("value_dtype", "value_bytes"), [("float32", 4), ("float16", 2)])
@pytest.mark.parametrize("numel", [1, 7, 1000, 4810])
def test_topk_wire_bytes_are_k_index_value_pairs(numel, value_dtype, value_bytes):
    comp = build_compressor({"name": "topk", "keep": 0.01, "value_dtype": value_dtype})
    payload = comp.compress(torch.randn(numel, generator=torch.Generator().manual_seed(numel)))
    k = max(1, math.ceil(0.01 * numel))
    assert kept(numel, 0.01) == k
    assert wire_size(payload) == k * (4 + value_bytes)  # int32 index + value


def test_int8_costs_one_byte_per_entry_plus_a_scale_and_rounds_within_half_a_step():
    x = torch.randn(300, generator=torch.Generator().manual_seed(0)) * 3
    comp = build_compressor({"name": "int8"})
    payload = comp.compress(x)
    assert payload["q"].dtype == torch.int8
    assert wire_size(payload) == 300 + 4
    scale = float(x.abs().max()) / 127
    assert float((comp.decompress(payload, x) - x).abs().max()) <= scale / 2 + 1e-6
    zeros = torch.zeros(5)
    assert torch.equal(comp.decompress(comp.compress(zeros), zeros), zeros)


@pytest.mark.parametrize("name", ["topk", "int8"])
def test_error_feedback_loses_nothing_over_time(name):
    comp = build_compressor({"name": name, **({"keep": 0.05} if name == "topk" else {})})
    feedback = ErrorFeedback(comp)
    gen = torch.Generator().manual_seed(1)
    sent = torch.zeros(200)
    total = torch.zeros(200)
    for _ in range(30):
        x = torch.randn(200, generator=gen)
        total += x
        payload = feedback.compress({"w": x})
        sent += comp.decompress(payload["w"], x)
    # Σ D(p_t) + e_T = Σ x_t: the memory holds exactly what has not been sent yet
    torch.testing.assert_close(sent + feedback.memory["w"], total, rtol=0, atol=1e-4)
    assert float(feedback.memory["w"].abs().max()) > 0  # something was held back


def test_without_feedback_topk_drops_signal():
    comp = build_compressor({"name": "topk", "keep": 0.05})
    x = torch.randn(200, generator=torch.Generator().manual_seed(2))
    assert float((comp.decompress(comp.compress(x), x) - x).norm()) > 0.5 * float(x.norm())


@pytest.mark.parametrize(("compression", "field"), [
    ({"name": "zip"}, "strategy.compression.name"),
    ({"name": "topk", "keep": 0.0}, "strategy.compression.keep"),
    ({"name": "topk", "keep": 1.5}, "strategy.compression.keep"),
    ({"name": "topk", "value_dtype": "int4"}, "strategy.compression.value_dtype"),
    ({"name": "topk", "scope": "layer"}, "strategy.compression.scope"),
    # CHOCO compresses each tensor's difference to its own public copy
    ({"name": "topk", "scope": "global"}, "strategy.compression.scope"),
])
def test_bad_compression_config_names_the_field(tmp_path, compression, field):
    with pytest.raises(ConfigError) as err:
        from_dict(tiny(tmp_path, strategy={"name": "choco", "compression": compression}))
    assert err.value.field == field


def update(seed=3):
    """A model's worth of tensors, one layer's entries 50× the others'."""
    gen = torch.Generator().manual_seed(seed)
    return {"b.weight": torch.randn(40, 30, generator=gen),
            "a.bias": torch.randn(30, generator=gen) * 50,
            "c.weight": torch.randn(7, generator=gen)}


def test_global_topk_keeps_the_largest_entries_of_the_whole_update():
    """Against numpy over the tensors concatenated in name order: exactly ⌈keep · d⌉
    entries in all, the largest |g| anywhere; the loud layer takes every place while a
    per-tensor Top-K gives it 1 %."""
    import numpy as np

    g = update()
    names = sorted(g)
    flat = np.concatenate([g[n].numpy().ravel() for n in names])
    k = math.ceil(0.01 * flat.size)
    top = np.argsort(-np.abs(flat), kind="stable")[:k]
    expected = np.zeros_like(flat)
    expected[top] = flat[top]
    comp = build_compressor({"name": "topk", "keep": 0.01, "scope": "global"})
    payload = compress_tree(comp, g)
    assert set(payload) == {WHOLE} and wire_size(payload) == k * (4 + 4)
    dense = decompress_tree(comp, payload, g)
    assert list(dense) == list(g)  # in the update's own order
    got = np.concatenate([dense[n].numpy().ravel() for n in names])
    np.testing.assert_array_equal(got, expected)
    assert int((dense["a.bias"] != 0).sum()) == k > kept(30, 0.01)  # all k places
    per_tensor = build_compressor({"name": "topk", "keep": 0.01})
    sparse = decompress_tree(per_tensor, compress_tree(per_tensor, g), g)
    assert [int((sparse[n] != 0).sum()) for n in g] == [kept(g[n].numel(), 0.01) for n in g]


def test_global_topk_int8_is_one_payload_with_one_scale_and_feedback_loses_nothing():
    comp = build_compressor({"name": "topk_int8", "keep": 0.05, "scope": "global"})
    feedback = ErrorFeedback(comp)
    gen = torch.Generator().manual_seed(4)
    total = {n: torch.zeros_like(t) for n, t in update().items()}
    sent = {n: torch.zeros_like(t) for n, t in total.items()}
    for _ in range(20):
        x = {n: torch.randn(t.shape, generator=gen) for n, t in total.items()}
        payload = feedback.compress(x)
        d = sum(t.numel() for t in x.values())
        assert wire_size(payload) == kept(d, 0.05) * 5 + 4  # index + INT8 value, one scale
        for n, t in decompress_tree(comp, payload, x).items():
            sent[n] += t
            total[n] += x[n]
    for n in total:  # Σ D(p_t) + e_T = Σ x_t, tensor by tensor
        torch.testing.assert_close(sent[n] + feedback.memory[n], total[n], rtol=0, atol=1e-4)


def test_an_importance_weight_ranks_the_whole_update():
    """Weighted global Top-K (DSO's |g'| ⊙ s): a tensor weighted 0 keeps nothing, one
    weighted high takes the places, a tensor without a weight ranks by |g|."""
    g = update()
    comp = build_compressor({"name": "topk", "keep": 0.05, "scope": "global"})
    weights = {"a.bias": torch.zeros(30), "b.weight": torch.full((40, 30), 1e3)}
    dense = decompress_tree(comp, compress_tree(comp, g, weights), g)
    assert int((dense["a.bias"] != 0).sum()) == 0 and int((dense["c.weight"] != 0).sum()) == 0
    assert int((dense["b.weight"] != 0).sum()) == kept(1237, 0.05)
