"""Zeroth-order pieces: seeded Gaussian regeneration (MeZO) and the SubCGE subspace."""

from __future__ import annotations

import copy
import subprocess
import sys

import numpy as np
import pytest
import torch

from decent.models.label_logits import label_word_logits
from decent.models.tiny import build_tiny
from decent.zo import mezo, subcge


def z_checksum(seed: int) -> str:
    t = torch.zeros(1000)
    mezo.add_gaussian([t], seed, 1.0)
    return str(float(t.double().sum()))


def test_regenerated_z_is_identical_in_another_process():
    code = ("import torch; from decent.zo import mezo; t = torch.zeros(1000); "
            "mezo.add_gaussian([t], 1234, 1.0); print(float(t.double().sum()))")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True).stdout.strip()
    assert other == z_checksum(1234)
    assert z_checksum(1234) != z_checksum(1235)


def test_z_leaves_the_global_rng_alone():
    before = torch.random.get_rng_state()
    mezo.add_gaussian([torch.zeros(10)], 7, 1.0)
    assert torch.equal(before, torch.random.get_rng_state())


def test_mezo_two_point_is_the_directional_derivative():
    theta = torch.randn(50, generator=torch.Generator().manual_seed(0))
    start = theta.clone()
    alpha = mezo.two_point([theta], lambda: float(0.5 * (theta.double() ** 2).sum()), 3, 1e-3)
    z = torch.zeros(50)
    mezo.add_gaussian([z], 3, 1.0)
    assert alpha == pytest.approx(float(start @ z), rel=1e-3)  # ∇f = θ for f = ½‖θ‖²
    torch.testing.assert_close(theta, start, rtol=0, atol=1e-6)  # restored up to rounding


@pytest.fixture
def llama():
    torch.manual_seed(0)
    return build_tiny("tiny-llama")


def dense_copy(model, basis, A):
    """A copy whose target weights are W + U A Vᵀ materialised."""
    other = copy.deepcopy(model)
    basis.fold(other, A)
    return other


# the targets of each layer set: every 2-D layer (Algorithm 1) or every Linear but the head
TARGETS = {
    ("tiny-llama", "all_2d"): 1 + 2 * 7,  # the embedding (the head tied to it) + 7 per block
    ("tiny-llama", "linear"): 2 * 7,  # q, k, v, o, gate, up, down per block
    ("tiny-opt", "all_2d"): 2 + 2 * 6,  # tokens and learned positions + q, k, v, out, fc1, fc2
    ("tiny-opt", "linear"): 2 * 6,
}


@pytest.mark.parametrize(("path", "layers"), sorted(TARGETS),
                         ids=[f"{p}-{s}" for p, s in sorted(TARGETS)])
def test_hooks_equal_materialised_low_rank_weights(path, layers):
    """Every target's hook (a Linear's, an embedding's, a tied head's) adds exactly what
    W + U A Vᵀ folded into the weights gives, on the full logits and on the label-word
    logits classification reads (which take the head's rows directly when nothing hooks
    it)."""
    torch.manual_seed(0)
    model = build_tiny(path)
    basis = subcge.SubspaceBasis(model, rank=4, seed=1, layers=layers)
    assert basis.num_layers == TARGETS[path, layers]
    embedded = [n for n in basis.names
                if isinstance(model.get_submodule(n), torch.nn.Embedding)]
    assert bool(embedded) == (layers == "all_2d")
    # a perturbation that moves the logits by ~10 (at 10× this, logits of ~100 differ in
    # their last bits by more than the tolerance)
    A = 0.1 * torch.randn(basis.num_layers, 4, 4, generator=torch.Generator().manual_seed(2))
    dense = dense_copy(model, basis, A)
    state = subcge.SubCGEState(A.clone())
    subcge.attach(model, basis, state)
    ids = torch.randint(250, (2, 12), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0  # a padded row: OPT's positions come from the mask
    torch.testing.assert_close(model(input_ids=ids, attention_mask=mask).logits,
                               dense(input_ids=ids, attention_mask=mask).logits,
                               rtol=1e-4, atol=1e-4)
    words = torch.tensor([5, 77, 200])
    torch.testing.assert_close(label_word_logits(model, ids, mask, words),
                               label_word_logits(dense, ids, mask, words),
                               rtol=1e-4, atol=1e-4)
    # the folded weights with A back at zero are the hooked model too
    state.A.zero_()
    basis.fold(model, A)
    torch.testing.assert_close(model(input_ids=ids, attention_mask=mask).logits,
                               dense(input_ids=ids, attention_mask=mask).logits,
                               rtol=1e-4, atol=1e-4)


def test_two_point_leaves_state_bit_identical_and_matches_dense(llama):
    basis = subcge.SubspaceBasis(llama, rank=4, seed=1)
    one_d = [p for _, p in subcge.one_d_tensors(llama)]
    state = subcge.SubCGEState(torch.randn(basis.num_layers, 4, 4) * 0.01, one_d=one_d)
    reference = copy.deepcopy(llama)
    subcge.attach(llama, basis, state)
    a_before, d_before = state.A.clone(), [t.clone() for t in one_d]
    ids = torch.randint(250, (2, 10), generator=torch.Generator().manual_seed(4))

    def loss() -> float:
        out = llama(input_ids=ids, labels=ids)
        return float(out.loss)

    alpha = subcge.two_point(basis, state, loss, seed=99, eps=1e-3)
    assert torch.equal(state.A, a_before)
    assert all(torch.equal(a, b) for a, b in zip(one_d, d_before, strict=True))
    # the same finite difference with the perturbation materialised densely
    i, j = subcge.pairs(99, basis.num_layers, 4)
    losses = []
    for sign in (1, -1):
        pert = a_before.clone()
        pert[torch.arange(basis.num_layers), i, j] += sign * 1e-3
        model = dense_copy(reference, basis, pert)
        mezo.add_gaussian([p for _, p in subcge.one_d_tensors(model)], 99, sign * 1e-3)
        losses.append(float(model(input_ids=ids, labels=ids).loss))
    assert alpha == pytest.approx((losses[0] - losses[1]) / 2e-3, rel=2e-2, abs=1e-3)


@pytest.mark.parametrize("n", [1, 16, 100])
def test_applying_messages_equals_dense_rank_one_updates(llama, n):
    basis = subcge.SubspaceBasis(llama, rank=8, seed=5)
    one_d = [torch.zeros(6), torch.zeros(3)]
    state = subcge.SubCGEState(torch.zeros(basis.num_layers, 8, 8), one_d=one_d)
    g = torch.Generator().manual_seed(n)
    messages = [(int(torch.randint(2**62, (1,), generator=g)), float(torch.randn(1, generator=g)))
                for _ in range(n)]
    subcge.apply_messages(state, messages)
    expected = [torch.zeros(s) for s in basis.shapes]
    for seed, coef in messages:
        i, j = subcge.pairs(seed, basis.num_layers, 8)
        for ell in range(basis.num_layers):
            expected[ell] -= coef * torch.outer(basis.U[ell][:, i[ell]], basis.V[ell][:, j[ell]])
    for ell in range(basis.num_layers):
        torch.testing.assert_close(basis.U[ell] @ state.A[ell] @ basis.V[ell].T, expected[ell],
                                   rtol=1e-4, atol=1e-4)
    dense_1d = [torch.zeros(6), torch.zeros(3)]
    mezo.apply_updates(dense_1d, messages)
    for a, b in zip(one_d, dense_1d, strict=True):
        torch.testing.assert_close(a, b)


def reference_apply(A: np.ndarray, messages, rank: int) -> np.ndarray:
    """An independent float32 reference of the A-part: per entry, the message values summed
    one by one in message order (Python floats rounded to float32 after every addition),
    then added to A once."""
    L = A.shape[0]
    sums: dict[tuple[int, int, int], np.float32] = {}
    for seed, coef in messages:
        g = torch.Generator().manual_seed(seed)
        ij = torch.randint(rank, (2, L), generator=g).tolist()
        for ell in range(L):
            key = (ell, ij[0][ell], ij[1][ell])
            sums[key] = np.float32(sums.get(key, np.float32(0)) + np.float32(-coef))
    out = A.copy()
    for (ell, i, j), v in sums.items():
        out[ell, i, j] = np.float32(out[ell, i, j] + v)
    return out


@pytest.mark.parametrize("n", [1, 50, 400])
def test_message_application_is_a_fixed_function_of_the_message_list(n):
    """What makes SubCGE consensus device-independent: the device receives each touched
    entry of A exactly once (distinct indices, so no atomic accumulation whose order a
    GPU may change) with the per-entry sum computed in message order on the CPU; the
    result equals a sequential float32 reference bit for bit. With rank 2 and 5 layers,
    many messages hit the same entries."""
    L, r = 5, 2
    g = torch.Generator().manual_seed(n)
    messages = [(int(torch.randint(2**62, (1,), generator=g)), float(torch.randn(1, generator=g)))
                for _ in range(n)]
    entries, sums = subcge.batch_update(L, r, messages)
    assert len(np.unique(entries.numpy())) == len(entries) == len(sums)  # each entry once
    if n >= 50:
        assert len(entries) < L * n  # repeated hits were merged
    start = torch.randn(L, r, r, generator=g)
    state = subcge.SubCGEState(start.clone())
    subcge.apply_messages(state, messages)
    expected = reference_apply(start.numpy(), messages, r)
    np.testing.assert_array_equal(state.A.numpy(), expected)


def test_batched_application_equals_one_by_one_from_zero():
    messages = [(s, 0.1 * s) for s in range(10)]
    batched = subcge.SubCGEState(torch.zeros(5, 4, 4))
    single = subcge.SubCGEState(torch.zeros(5, 4, 4))
    subcge.apply_messages(batched, messages)
    for m in messages:
        subcge.apply_messages(single, [m])
    assert torch.equal(batched.A, single.A)


def test_pairs_in_range_and_seeded():
    i, j = subcge.pairs(11, 50, 8)
    assert int(i.min()) >= 0 and int(i.max()) < 8 and int(j.max()) < 8
    i2, j2 = subcge.pairs(11, 50, 8)
    assert torch.equal(i, i2) and torch.equal(j, j2)
    assert not torch.equal(i, subcge.pairs(12, 50, 8)[0])


def test_a_process_applies_the_same_updates_to_the_same_bits_once():
    """SubCGE.apply: a second replica with the same bits and the same updates is given the
    first one's result, bit for bit what applying computes; a replica whose bits differ
    (even by -0.0) is computed, never copied."""
    from decent.zo import subcge as sc
    from decent.zo.estimators import SubCGE

    est = SubCGE(4, 0)
    updates = [(11, 0.5), (3, -0.25), (7, 1e-3)]

    def replica(first: float = 0.0) -> sc.SubCGEState:
        A = torch.zeros(3, 4, 4)
        A[0, 0, 0] = first
        return sc.SubCGEState(A, one_d=[torch.ones(5), torch.zeros(2)])

    reference = replica()
    sc.apply_messages(reference, updates)
    calls = []
    real = sc.apply_messages

    def counted(state, msgs):
        calls.append(len(msgs))
        real(state, msgs)

    import unittest.mock as mock

    with mock.patch.object(sc, "apply_messages", counted):
        a, b, c = replica(), replica(), replica(-0.0)
        for r in (a, b, c):
            est.apply(r, updates)
    assert calls == [3, 3]  # a computed, b copied, c (-0.0) computed
    for r in (a, b):
        assert torch.equal(r.A, reference.A)
        for t, ref in zip(r.one_d, reference.one_d, strict=True):
            assert torch.equal(t, ref)
