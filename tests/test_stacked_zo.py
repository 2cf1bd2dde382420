"""Zeroth-order estimates batched (decent.engine.stacked_zo): a chunk's ±ε evaluations in
one computation give each client its own estimate, within the stated tolerance of
sequential mode, and leave every replica bit-for-bit as it was; batched runs of SeedFlood,
MeZO, DZSGD and seed gossip match sequential ones."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from decent.backends.local import local_engine
from decent.core.errors import ConfigError
from decent.engine.config import from_dict
from decent.engine.stacked_zo import LOSS_RTOL, estimates, unstackable
from decent.run.runner import run
from decent.strategies.zo_estimate import EstimateRequest, estimate_alone
from decent.strategies.zo_training import IN_PLACE
from decent.zo.estimators import DenseReplica
from tests.helpers import tiny

LM_TASK = {"name": "lm", "corpus": "shakespeare", "seq_len": 32, "max_tokens": 20_000,
           "partition": "contiguous", "max_eval_sequences": 8}
LLAMA = {"name": "causal_lm", "path": "tiny-llama"}
OPT = {"name": "causal_lm", "path": "tiny-opt"}  # biases and LayerNorms: the paper's family
MLP = {"name": "mlp", "hidden": [16]}


def flood(tmp_path: Path, mode: str, model: dict, estimator: str = "subcge", n: int = 4,
          rounds: int = 3):
    llm = model["name"] == "causal_lm"
    return from_dict(tiny(
        tmp_path, rounds=rounds, topology={"name": "ring", "n": n},
        task=LM_TASK if llm else {"name": "digits"}, model=model,
        strategy={"name": "seedflood", "lr": 1e-3 if llm else 0.05, "eps": 1e-3,
                  "batch_size": 4, "rank": 8, "estimator": estimator},
        eval={"every": 1, "per_client": False}, execution={"mode": mode}))


def requests_of(group, estimator=None, replicas=None) -> list[EstimateRequest]:
    """One request per client: its own batch and seed, as the strategies draw them."""
    out = []
    for cid, client in group.clients.items():
        client.model.eval()
        batch = client.data.sample(4, client.generator)
        replica = client.state.replica if replicas is None else replicas[cid]
        out.append(EstimateRequest(client, estimator or group.shared.estimator, replica,
                                   group.task, batch, 1000 + 7 * cid, 1e-3))
    return out


def model_vectors(group) -> dict[int, np.ndarray]:
    return {cid: torch.cat([p.detach().reshape(-1) for p in c.model.parameters()]).numpy()
            for cid, c in group.clients.items()}


@pytest.mark.parametrize(("model", "estimator"), [(LLAMA, "subcge"), (OPT, "subcge"),
                                                  (MLP, "subcge"), (MLP, "mezo"),
                                                  (MLP, "in_place")],
                         ids=["llama-subcge", "opt-subcge", "mlp-subcge", "mlp-mezo",
                              "mlp-mezo-in-place"])
def test_stacked_estimates_match_alone_and_restore_every_replica(tmp_path, model, estimator):
    """Four clients' estimates in one computation: each loss within LOSS_RTOL of the
    client's own sequential estimate, and every model left bit-for-bit as sequential
    mode leaves it (unchanged; MeZO's in-place step: the same rounding residue)."""
    group = local_engine(flood(tmp_path, "sequential", model,
                               "mezo" if estimator == "in_place" else estimator)).group
    replicas, kind = None, None
    if estimator == "in_place":  # MeZO's own step, as zo_steps takes it
        replicas = {cid: DenseReplica(list(c.model.parameters()))
                    for cid, c in group.clients.items()}
        kind = IN_PLACE
    client = group.clients[0]
    probe = client.data.sample(4, torch.Generator().manual_seed(5))
    with torch.no_grad():
        probe_loss = float(group.task.loss(client.model, probe))
    draws = {cid: c.generator.get_state() for cid, c in group.clients.items()}
    saved = {cid: [p.detach().clone() for p in c.model.parameters()]
             for cid, c in group.clients.items()}
    before = model_vectors(group)
    alone = {req.client.cid: estimate_alone(req)
             for req in requests_of(group, kind, replicas)}
    after_alone = model_vectors(group)
    if estimator != "in_place":  # restored exactly (in place: up to MeZO's residue)
        for cid, vec in after_alone.items():
            np.testing.assert_array_equal(vec, before[cid])
    # the same draws again from the same models, now stacked
    with torch.no_grad():
        for cid, c in group.clients.items():
            c.generator.set_state(draws[cid])
            for p, value in zip(c.model.parameters(), saved[cid], strict=True):
                p.copy_(value)
    reqs = requests_of(group, kind, replicas)
    assert all(unstackable(req) is None for req in reqs)
    stacked = estimates(reqs)
    for cid, (alpha, losses) in stacked.items():
        ref_alpha, ref_losses = alone[cid]
        np.testing.assert_allclose(losses, ref_losses, rtol=LOSS_RTOL, atol=0)
        # α is the losses' difference over 2ε: their rounding, amplified by 1/2ε
        assert abs(alpha - ref_alpha) <= 2 * LOSS_RTOL * max(map(abs, ref_losses)) / 2e-3
    for cid, vec in model_vectors(group).items():
        np.testing.assert_array_equal(vec, after_alone[cid])
    if estimator != "in_place":  # the model computes as before: hooks, norms put back
        with torch.no_grad():
            assert float(group.task.loss(client.model, probe)) == probe_loss


@pytest.mark.parametrize("model", [LLAMA, OPT], ids=["llama", "opt"])
def test_batched_seedflood_tiny_lm_matches_sequential(tmp_path, model):
    """SeedFlood with SubCGE on a tiny Llama (RMSNorms) and a tiny OPT (LayerNorms and
    biases), batched: the same rows (losses within the stated tolerance; bytes, messages,
    staleness exactly) and replicas still identical."""
    seq = run(flood(tmp_path, "sequential", model)).rows
    bat = run(flood(tmp_path, "batched", model)).rows
    approx = {"loss", "gmp_loss", "gmp_perplexity", "round_wall_s"}
    for a, b in zip(seq, bat, strict=True):
        assert {k: v for k, v in a.items() if k not in approx} == \
            {k: v for k, v in b.items() if k not in approx}
        assert b["loss"] == pytest.approx(a["loss"], rel=LOSS_RTOL)
        assert b["gmp_loss"] == pytest.approx(a["gmp_loss"], rel=LOSS_RTOL)
        assert b["consensus_distance"] == 0.0
    backend = local_engine(flood(tmp_path, "batched", model))
    assert backend.group.batcher is not None
    for r in range(2):
        backend.run_round(r)
    vectors = list(backend.client_vectors().values())
    for vec in vectors:
        np.testing.assert_array_equal(vec, vectors[0])


@pytest.mark.parametrize("name", ["mezo", "dzsgd", "seed_gossip"])
def test_batched_mezo_steps_match_sequential(tmp_path, name):
    """Dense MeZO steps (vmapped on the MLP): the same draws, and models within rounding
    (each update's coefficient carries the losses' tolerance, amplified by 1/2ε)."""
    def cfg(mode: str):
        return from_dict(tiny(tmp_path, rounds=2, topology={"name": "ring", "n": 4},
                              strategy={"name": name, "local_steps": 2, "batch_size": 8,
                                        "lr": 1e-3, "eps": 1e-3},
                              eval={"every": 0, "per_client": False},
                              execution={"mode": mode}))

    seq, bat = local_engine(cfg("sequential")), local_engine(cfg("batched"))
    assert bat.group.batcher is not None
    for r in range(2):
        seq.run_round(r)
        bat.run_round(r)
    a, b = seq.client_vectors(), bat.client_vectors()
    for cid, vec in a.items():
        assert torch.equal(seq.group.clients[cid].generator.get_state(),
                           bat.group.clients[cid].generator.get_state())
        # 4 steps of lr · Δα · z, Δα ≤ 2 · LOSS_RTOL · ℓ / 2ε: measured 1.3e-6
        np.testing.assert_allclose(b[cid], vec, rtol=0, atol=1e-5)


@pytest.mark.parametrize(("model", "estimator", "reason"), [
    (LLAMA, "mezo", "dense MeZO perturbations of a transformers model"),
])
def test_what_cannot_stack_is_refused_in_one_line(tmp_path, model, estimator, reason):
    with pytest.raises(ConfigError, match=reason):
        local_engine(flood(tmp_path, "batched", model, estimator, rounds=1))
    assert local_engine(flood(tmp_path, "auto", model, estimator, rounds=1)).group.batcher \
        is None


def test_batched_seedflood_on_ray_equals_the_local_batched_run(tmp_path, ray_session):
    """The hooked SubCGE path on Ray, 4 tiny-Llama clients in 2 actors of 2 (each chunk
    padded to 4 rows): the local batched run's rows and every replica, bit for bit."""
    from decent.engine.config import to_dict
    from tests.helpers import assert_ray_equals_local

    assert_ray_equals_local(to_dict(flood(tmp_path, "batched", LLAMA, rounds=2)), 2)


def test_a_one_d_tensor_that_is_no_scale_or_shift_is_named():
    """A 1-D tensor the stacked forward cannot apply per row (here a BatchNorm's weight
    in a tiny OPT) is named in the refusal; OPT's own LayerNorms and biases are not."""
    from decent.engine.stacked_zo import SCALE, SHIFT, one_d_problem, one_d_role
    from decent.models.tiny import build_tiny

    model = build_tiny("tiny-opt")
    assert one_d_problem(model) is None
    layer = "model.decoder.layers.0"
    assert one_d_role(model, f"{layer}.self_attn_layer_norm.weight") == SCALE
    assert one_d_role(model, f"{layer}.self_attn_layer_norm.bias") == SHIFT
    assert one_d_role(model, f"{layer}.fc1.bias") == SHIFT
    model.get_submodule(layer).add_module("odd", torch.nn.BatchNorm1d(64))
    problem = one_d_problem(model)
    assert problem is not None and f"{layer}.odd.weight" in problem
