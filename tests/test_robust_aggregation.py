"""Robust aggregation rules against numpy on hand-made inputs, and commitments: a one-bit
change anywhere in a payload, its nonce or its digest is caught."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from decent.core.errors import ConfigError
from decent.robust.aggregators import aggregate, krum, median, trimmed_mean, weighted_mean
from decent.robust.commitment import DIGEST_BYTES, commitment, draw_nonce, verifies

# five senders, four coordinates; sender 4 is an outlier on every coordinate
HAND = np.array([
    [1.0, -2.0, 0.5, 10.0],
    [2.0, -1.0, 0.5, 11.0],
    [3.0, 0.0, 0.5, 12.0],
    [4.0, 1.0, 0.5, 13.0],
    [1e6, -1e6, 1e6, -1e6],
])


def test_trimmed_mean_drops_beta_m_per_side_per_coordinate():
    # β = 0.2 of 5 senders: one value cut from each end of every coordinate
    got = trimmed_mean(torch.tensor(HAND), 0.2).numpy()
    expected = [np.sort(HAND[:, j])[1:4].mean() for j in range(4)]
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got, [3.0, -1.0, 0.5, 11.0])  # the outlier is gone
    # β = 0.1 of 5 senders can still be one of them: ⌈0.5⌉ = 1 per side, the same cut
    np.testing.assert_allclose(trimmed_mean(torch.tensor(HAND), 0.1).numpy(), expected)
    # β = 0.1 of 30: ⌈3⌉ = 3 per side exactly (0.1·30 is 3.0000000000000004 in floats)
    rows = np.arange(60.0).reshape(30, 2)
    np.testing.assert_allclose(trimmed_mean(torch.tensor(rows), 0.1).numpy(),
                               rows[3:27].mean(0))
    # never all: β = 0.45 of 4 would cut 2 per side, (4 − 1) // 2 = 1 is kept to
    np.testing.assert_allclose(trimmed_mean(torch.tensor(HAND[:4]), 0.45).numpy(),
                               np.sort(HAND[:4], axis=0)[1:3].mean(0))
    # β = 0 is the plain mean
    np.testing.assert_allclose(trimmed_mean(torch.tensor(HAND), 0.0).numpy(), HAND.mean(0))


def test_median_is_numpys_for_odd_and_even_counts():
    for rows in (HAND, HAND[:4]):
        got = median(torch.tensor(rows)).numpy()
        np.testing.assert_allclose(got, np.median(rows, axis=0), rtol=0, atol=1e-12)


def test_krum_picks_the_vector_closest_to_its_neighbours():
    # f = ⌈0.2·5⌉ = 1: each score sums the m − f − 2 = 2 nearest squared distances
    got = krum(torch.tensor(HAND), 0.2).numpy()
    d = ((HAND[:, None, :] - HAND[None, :, :]) ** 2).sum(-1)
    scores = [np.sort(np.delete(d[i], i))[:2].sum() for i in range(5)]
    np.testing.assert_array_equal(got, HAND[int(np.argmin(scores))])
    assert int(np.argmin(scores)) in (1, 2)  # a middle honest sender
    with pytest.raises(ValueError):
        krum(torch.tensor(HAND[:4]), 0.25)  # m = 4 ≤ 2f + 2


def test_aggregate_keeps_shapes_and_dtypes_and_names_bad_rules():
    vectors = [torch.tensor(r, dtype=torch.float32).reshape(2, 2) for r in HAND]
    out = aggregate("median", vectors)
    assert out.shape == (2, 2) and out.dtype == torch.float32
    np.testing.assert_allclose(out.reshape(-1).numpy(), np.median(HAND, axis=0))
    np.testing.assert_allclose(aggregate("mean", vectors).reshape(-1).numpy(),
                               HAND.mean(0).astype(np.float32), rtol=1e-6)
    with pytest.raises(ConfigError) as err:
        aggregate("geomedian", vectors)
    assert err.value.field == "strategy.aggregator.name"
    assert "trimmed_mean" in err.value.message  # the names to choose from


def payload():
    g = torch.Generator().manual_seed(0)
    return {"values": torch.randn(50, generator=g), "indices": torch.arange(50) * 3,
            "scale": torch.tensor([0.25])}


def flip_bit(t: torch.Tensor, index: int, bit: int) -> torch.Tensor:
    raw = t.clone().reshape(-1).view(torch.uint8)
    raw[index] ^= 1 << bit
    return raw.view(t.dtype).reshape(t.shape)


def test_a_commitment_verifies_and_any_one_bit_change_is_caught():
    nonce = draw_nonce(torch.Generator().manual_seed(1))
    digest = commitment(payload(), nonce)
    assert len(digest) == DIGEST_BYTES and verifies(payload(), nonce, digest)
    for key in ("values", "indices", "scale"):
        size = payload()[key].numel() * payload()[key].element_size()
        for byte in (0, size // 2, size - 1):
            for bit in (0, 7):
                forged = payload()
                forged[key] = flip_bit(forged[key], byte, bit)
                assert not verifies(forged, nonce, digest), (key, byte, bit)
    other_nonce = bytes([nonce[0] ^ 1]) + nonce[1:]
    assert not verifies(payload(), other_nonce, digest)
    assert not verifies(payload(), nonce, bytes([digest[0] ^ 1]) + digest[1:])
    # same values, another shape or dtype: another digest
    reshaped = payload()
    reshaped["values"] = reshaped["values"].reshape(5, 10)
    assert not verifies(reshaped, nonce, digest)
    assert commitment({**payload(), "scale": torch.tensor([0.25], dtype=torch.float64)},
                      nonce) != digest


def test_nonces_are_fresh_per_draw_and_reproducible_per_seed():
    g = torch.Generator().manual_seed(3)
    a, b = draw_nonce(g), draw_nonce(g)
    assert a != b and len(a) == 16
    assert draw_nonce(torch.Generator().manual_seed(3)) == a


def test_weighted_mean_by_hand():
    rows = [torch.tensor(r, dtype=torch.float32) for r in HAND[:3]]
    # (8·row0 + 11·row1 + 1·row2) / 20, coordinate by coordinate
    expected = np.array([(8 * 1 + 11 * 2 + 1 * 3) / 20, (8 * -2 + 11 * -1 + 0) / 20, 0.5,
                         (8 * 10 + 11 * 11 + 1 * 12) / 20])
    np.testing.assert_allclose(weighted_mean(rows, [8, 11, 1]).numpy(), expected, rtol=1e-6)
    with pytest.raises(ValueError):
        weighted_mean(rows, [1, 2])
