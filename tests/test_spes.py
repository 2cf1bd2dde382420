"""SPES: the expert partition, frozen experts (untouched by training, no optimiser state,
one copy per process and per version of the global model), the server's aggregation and
assignment against the uploads that crossed the router, the merging warm-up against its
formula and schedule, the router losses logged and off when zero, bytes per round in
closed form, bad settings, a newcomer, and both backends under lost broadcasts."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import yaml

from decent.backends.local import local_engine
from decent.core.errors import ConfigError
from decent.engine.config import from_dict
from decent.engine.plan import build_plan
from decent.models.expert_merging import merge_layer, merged, most_similar
from decent.models.experts import ExpertMLP, SplitExperts
from decent.strategies.spes import SERVER
from decent.tools.cli import main
from tests.helpers import (
    WrapsBackend,
    engine_for,
    moe_lm,
    rows_and_vectors,
    rows_and_vectors_on,
)

# tiny-moe: 2 layers of 4 experts, each gate/up/down of 64 × 64 (no biases)
LAYERS, EXPERTS, HIDDEN, INTER = 2, 4, 64, 64
EXPERT_VALUES = 3 * HIDDEN * INTER  # one expert of one layer


def spes(tmp_path, n=5, rounds=2, sections=None, **strategy):
    """A SPES config; ``strategy`` overrides strategy fields, ``sections`` whole sections."""
    return moe_lm(tmp_path, rounds=rounds, topology={"name": "star", "n": n},
                  strategy={"name": "spes", "local_steps": 3, "batch_size": 4, "lr": 3e-3,
                            # the paper's 2 000-step warm-up is longer than these runs
                            "lr_schedule": {"name": "constant"},
                            "merge_warmup_steps": 0, **strategy},
                  eval={"every": 1, "per_client": False}, **(sections or {}))


def experts_of(model, e):
    return [n for n, _ in model.named_parameters() if f".experts.{e}." in n]


# ---------------------------------------------------------------------------- partition
@pytest.mark.parametrize("partition", ["contiguous", "round_robin"])
@pytest.mark.parametrize(("experts", "workers"), [(4, 4), (16, 4), (16, 3), (4, 8), (16, 16)])
def test_every_expert_is_owned_exactly_once(tmp_path, partition, experts, workers):
    strategy = build_plan(from_dict(spes(tmp_path, n=workers + 1, partition=partition))).strategy
    owner = strategy.owners(experts)
    assert sorted(owner) == list(range(experts))
    assert set(owner.values()) <= set(range(1, workers + 1))
    counts = [list(owner.values()).count(w) for w in range(1, workers + 1)]
    assert max(counts) - min(counts) <= 1 and sum(counts) == experts
    if partition == "round_robin":
        assert [owner[e] for e in range(experts)] == [1 + e % workers for e in range(experts)]
    else:  # contiguous blocks in worker order
        assert [owner[e] for e in range(experts)] == sorted(owner.values())


def test_workers_train_exactly_the_experts_the_partition_gives_them(tmp_path):
    backend = local_engine(from_dict(spes(tmp_path, n=3, partition="explicit",
                                          expert_owner=[2, 1, 1, 2])))
    for cid, own in ((1, {1, 2}), (2, {0, 3})):
        model = backend.group.clients[cid].model
        trainable = {n for n, p in model.named_parameters() if p.requires_grad}
        experts = {n for e in range(EXPERTS) for n in experts_of(model, e)}
        assert trainable & experts == {n for e in own for n in experts_of(model, e)}
        assert trainable - experts == set(backend.group.shared.phi_names)
    backend.close()


@pytest.mark.parametrize(("strategy", "field"), [
    ({"partition": "explicit"}, "strategy.expert_owner"),
    ({"expert_owner": [1, 1, 2, 2]}, "strategy.expert_owner"),
    ({"partition": "explicit", "expert_owner": [1, 1, 2, 5]}, "strategy.expert_owner"),
    ({"partition": "explicit", "expert_owner": [1, 2]}, "strategy.expert_owner"),
    ({"merge_warmup_steps": 30, "merge_every": 4}, "strategy.merge_every"),
    ({"merge_warmup_steps": 30, "merge_every": 6, "merge_top_k": 4}, "strategy.merge_top_k"),
])
def test_a_bad_setting_is_one_line_and_writes_nothing(tmp_path, capsys, strategy, field):
    cfg = spes(tmp_path, n=3, **strategy)
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert field in err and len(err.splitlines()) == 1
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_dense_model_or_a_ring_is_refused(tmp_path):
    with pytest.raises(ConfigError) as err:
        local_engine(from_dict({**spes(tmp_path),
                                "model": {"name": "causal_lm", "path": "tiny-llama"}}))
    assert err.value.field == "model.path"
    with pytest.raises(ConfigError) as err:
        build_plan(from_dict({**spes(tmp_path), "topology": {"name": "ring", "n": 5}}))
    assert err.value.field == "topology.name"


# ---------------------------------------------------------------------------- frozen experts
def test_local_training_leaves_frozen_experts_bit_for_bit_and_trains_own(tmp_path):
    backend = local_engine(from_dict(spes(tmp_path, n=5)))
    group, shared = backend.group, backend.group.shared
    before = {cid: {n: p.detach().clone() for n, p in c.model.named_parameters()}
              for cid, c in group.clients.items()}
    group.run_phase(0, 0, "local", {})
    for cid in range(1, 5):
        client = group.clients[cid]
        live = dict(client.model.named_parameters())
        own = set(shared.own(cid))
        assert len(own) == LAYERS * 3  # one expert per worker: gate, up, down per layer
        for name in shared.frozen_of(cid):
            assert torch.equal(live[name], before[cid][name]), name
            assert live[name].grad is None and not live[name].requires_grad
        for name in own | set(shared.phi_names):
            assert not torch.equal(live[name], before[cid][name]), name
        # the optimiser holds state for exactly φ and the worker's own experts
        optimizer = client.state.optimizer
        held = {id(p) for g in optimizer.param_groups for p in g["params"]}
        expected = {id(live[n]) for n in own | set(shared.phi_names)}
        assert held == expected
        assert {id(p) for p in optimizer.state} == expected
    backend.close()


def test_frozen_experts_are_held_once_per_process(tmp_path):
    backend = local_engine(from_dict(spes(tmp_path, n=5, rounds=3)))
    for r in range(3):
        backend.run_round(r)
    group, frozen = backend.group, backend.group.shared.frozen
    assert set(frozen.versions) == {2}  # the broadcast of round 2, and nothing older
    assert frozen.holders == {1: 2, 2: 2, 3: 2, 4: 2}
    for name, tensor in frozen.versions[2].items():
        users = [cid for cid in range(1, 5)
                 if dict(group.clients[cid].model.named_parameters())[name] is tensor]
        owner = [cid for cid in range(1, 5) if name in group.shared.own(cid)]
        assert users == [c for c in range(1, 5) if c not in owner]  # everyone else
    # expert storage: the process copy, each worker's own, the server's and the probe's
    storages = {p.untyped_storage().data_ptr()
                for c in [*group.clients.values(), group.probe]
                for n, p in c.model.named_parameters() if ".experts." in n}
    all_experts = LAYERS * EXPERTS * 3
    assert len(storages) == all_experts * 3 + LAYERS * 3 * 4
    backend.close()


# ---------------------------------------------------------------------------- the round
def test_the_server_averages_phi_and_assigns_each_expert_from_its_owner(tmp_path):
    backend = local_engine(from_dict(spes(tmp_path, n=5)))
    group, shared = backend.group, backend.group.shared
    phi0 = {n: p.detach().clone() for n, p in group.clients[SERVER].model.named_parameters()
            if n in shared.phi_names}
    posted = backend.record_messages()
    trained = {}
    run_phase = group.run_phase

    def spy_phase(round_, step, phase, inboxes, members=None):
        out = run_phase(round_, step, phase, inboxes, members)
        if phase == "local":
            trained.update({cid: {n: p.detach().clone() for n, p in
                                  group.clients[cid].model.named_parameters()}
                            for cid in range(1, 5)})
        return out

    group.run_phase = spy_phase
    backend.run_round(0)
    uploads = {m.src: m.payload for m in posted if m.tag == "update"}
    assert sorted(uploads) == [1, 2, 3, 4]
    server = dict(group.clients[SERVER].model.named_parameters())
    for cid, payload in uploads.items():  # Δφ_i and the worker's own experts, nothing else
        assert set(payload) == set(shared.phi_names) | set(shared.own(cid))
        for n in shared.own(cid):
            assert torch.equal(payload[n], trained[cid][n])
            assert torch.equal(server[n], trained[cid][n])  # assigned, bit for bit
    for n in shared.phi_names:  # outer SGD, lr 1: the mean of the workers' φ
        mean = np.mean([trained[c][n].double().numpy() for c in range(1, 5)], axis=0)
        np.testing.assert_allclose(server[n].detach().double().numpy(), mean, atol=1e-6)
        assert not torch.equal(server[n], phi0[n])
    # every worker now holds the server's model exactly
    vectors = group.vectors(list(range(5)))
    for cid in range(1, 5):
        np.testing.assert_array_equal(vectors[cid], vectors[SERVER])
    backend.close()


def test_bytes_per_round_are_the_closed_form_and_below_diloco(tmp_path):
    rows, _ = rows_and_vectors(from_dict(spes(tmp_path, n=5, rounds=2)))
    model = local_engine(from_dict(spes(tmp_path, n=5)))
    shared = model.group.shared
    sizes = dict(model.group.clients[1].model.named_parameters())
    d = sum(p.numel() for p in model.group.clients[1].model.parameters())
    phi = sum(sizes[n].numel() for n in shared.phi_names)
    up = sum(4 * (phi + sum(sizes[n].numel() for n in shared.own(c))) for c in range(1, 5))
    down = 4 * 4 * d
    model.close()
    assert phi + EXPERTS * EXPERT_VALUES * LAYERS == d
    assert up == 4 * (4 * phi + LAYERS * EXPERTS * EXPERT_VALUES)  # each expert once
    assert [r["bytes"] for r in rows] == [up + down] * 2
    diloco, _ = rows_and_vectors(from_dict(moe_lm(
        tmp_path, rounds=1, topology={"name": "star", "n": 5},
        strategy={"name": "diloco", "local_steps": 3, "batch_size": 4})))
    assert diloco[0]["bytes"] == 2 * 4 * 4 * d


# ---------------------------------------------------------------------------- merging
def reference_neighbours(projections: np.ndarray, k: int) -> np.ndarray:
    """Top-k by cosine similarity, other experts only, ties to the lower index."""
    out = []
    for e, p in enumerate(projections):
        sims = [(-float(p @ q / np.linalg.norm(p) / np.linalg.norm(q)), j)
                for j, q in enumerate(projections) if j != e]
        out.append([j for _, j in sorted(sims)[:k]])
    return np.array(out)


def test_most_similar_experts_by_cosine_on_hand_made_projections():
    projections = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [-1.0, 0.0], [2.0, 0.0]])
    got = most_similar(torch.tensor(projections), 2).numpy()
    np.testing.assert_array_equal(got, reference_neighbours(projections, 2))
    # e0 and e4 point the same way (cosine 1): each other's first, whatever the norms
    assert got[0, 0] == 4 and got[4, 0] == 0 and got[3, 0] == 2


@pytest.mark.parametrize("task_vectors", ["mean", "sum"])
def test_task_arithmetic_merge_against_the_formula(task_vectors):
    rng = np.random.default_rng(0)
    weights = rng.normal(size=(5, 3, 2))
    neighbours = np.array([[1, 2], [0, 4], [3, 1], [2, 0], [1, 3]])
    alpha = 0.1
    expected = weights.copy()
    for e in range(5):  # E_e + α · mean_k / Σ_k (E_k − E_e), from the pre-merge values
        vectors = [weights[k] - weights[e] for k in neighbours[e]]
        pull = np.mean(vectors, axis=0) if task_vectors == "mean" else np.sum(vectors, axis=0)
        expected[e] = weights[e] + alpha * pull
    got = merged(torch.tensor(weights), torch.tensor(neighbours), alpha, task_vectors)
    np.testing.assert_allclose(got.numpy(), expected, rtol=0, atol=1e-12)


def authors_merge(state: dict[str, torch.Tensor], topk: int, alpha: float) -> dict:
    """The merge of SPES's released server (zjr2000/SPES,
    spes/spes/spes_server_knowledge_transfer.py,
    merge_experts_task_vector_topk_cosine_w1_per_layer), written again from that function:
    keys ``layers.{l}.ffn.experts.mlp.{expert_w1|expert_v1|expert_w2}.{e}``; per layer the
    cosine similarity of the flattened w1 (gate) alone, the top-k other experts, and every
    parameter of the expert moved by α times the MEAN of the k task vectors, all from the
    pre-merge values."""
    layers: dict[int, dict[int, dict[str, torch.Tensor]]] = {}
    for key, value in state.items():
        parts = key.split(".")
        layers.setdefault(int(parts[1]), {}).setdefault(int(parts[-1]), {})[key] = value
    out = dict(state)
    for experts in layers.values():
        ids = sorted(experts)
        w1 = torch.stack([next(v for k, v in experts[e].items() if "expert_w1" in k).reshape(-1)
                          for e in ids])
        sim = torch.nn.functional.cosine_similarity(w1.unsqueeze(1), w1.unsqueeze(0), dim=2)
        for i, e in enumerate(ids):
            scores = sim[i].clone()
            scores[i] = -float("inf")
            donors = [ids[j] for j in torch.topk(scores, k=topk).indices.tolist()]
            base = torch.cat([p.reshape(-1) for p in experts[e].values()])
            mean_tv = torch.stack([torch.cat([p.reshape(-1) for p in experts[d].values()]) - base
                                   for d in donors]).mean(dim=0)
            new, offset = base + alpha * mean_tv, 0
            for key, p in experts[e].items():
                out[key] = new[offset:offset + p.numel()].view_as(p)
                offset += p.numel()
    return out


def test_merge_layer_equals_the_authors_merge_on_hand_made_experts():
    torch.manual_seed(0)
    act = torch.nn.SiLU()

    def linear(i, o):
        return torch.nn.Linear(i, o, bias=False, dtype=torch.float64)

    layers = [SplitExperts(ExpertMLP(linear(4, 3), linear(4, 3), linear(3, 4), act)
                           for _ in range(6)) for _ in range(2)]
    names = {"gate_proj.weight": "expert_w1", "up_proj.weight": "expert_v1",
             "down_proj.weight": "expert_w2"}
    state = {f"layers.{li}.ffn.experts.mlp.{names[n]}.{e}": p.detach().clone()
             for li, layer in enumerate(layers) for e, expert in enumerate(layer)
             for n, p in expert.named_parameters()}
    want = authors_merge(state, topk=4, alpha=0.1)
    for layer in layers:  # the defaults: mean of task vectors, gate similarity
        merge_layer(layer, 4, 0.1)
    for li, layer in enumerate(layers):
        for e, expert in enumerate(layer):
            for n, p in expert.named_parameters():
                key = f"layers.{li}.ffn.experts.mlp.{names[n]}.{e}"
                np.testing.assert_allclose(p.detach().numpy(), want[key].numpy(),
                                           rtol=0, atol=1e-12)
                assert not torch.equal(p.detach(), state[key])  # every expert moved


def test_merge_layer_with_gate_up_similarity_and_summed_task_vectors():
    torch.manual_seed(0)
    act = torch.nn.SiLU()

    def linear(i, o):
        return torch.nn.Linear(i, o, bias=False)

    layer = SplitExperts(ExpertMLP(linear(3, 2), linear(3, 2), linear(2, 3), act)
                         for _ in range(4))
    before = [{n: p.detach().double().numpy().copy() for n, p in e.named_parameters()}
              for e in layer]
    projections = np.stack([np.concatenate([b["gate_proj.weight"].ravel(),
                                            b["up_proj.weight"].ravel()]) for b in before])
    expect_nb = reference_neighbours(projections, 2)
    used = merge_layer(layer, 2, 0.25, task_vectors="sum", similarity="gate_up")
    np.testing.assert_array_equal(used.numpy(), expect_nb)
    for e, expert in enumerate(layer):
        for n, p in expert.named_parameters():
            want = before[e][n] + 0.25 * sum(before[k][n] - before[e][n] for k in expect_nb[e])
            np.testing.assert_allclose(p.detach().double().numpy(), want, atol=1e-6)


def test_merges_happen_exactly_on_the_schedule(tmp_path):
    # H = 2, M = 4, T_w = 14: merges after the syncs ending steps 4, 8, 12
    strategy = build_plan(from_dict(spes(tmp_path, local_steps=2, merge_warmup_steps=14,
                                         merge_every=4, merge_top_k=2))).strategy
    expected = {1: 0.1 * (1 - 4 / 14), 3: 0.1 * (1 - 8 / 14), 5: 0.1 * (1 - 12 / 14)}
    for r in range(10):
        assert strategy.merge_strength(r) == pytest.approx(expected.get(r, 0.0), abs=0)
    rows, _ = rows_and_vectors(from_dict(spes(tmp_path, rounds=8, local_steps=2,
                                              merge_warmup_steps=14, merge_every=4,
                                              merge_top_k=2)))
    assert {r["round"]: r["merge_alpha"] for r in rows if "merge_alpha" in r} == \
        pytest.approx(expected)


# ---------------------------------------------------------------------------- router losses
def test_router_losses_are_logged_and_off_when_zero(tmp_path):
    rows, _ = rows_and_vectors(from_dict(spes(tmp_path, rounds=1)))
    # megablocks' balance is 1 when balanced and at most E; each term's definition is
    # checked against the authors' code in tests/test_spes_losses.py
    assert 0 < rows[0]["balance_loss"] <= EXPERTS and rows[0]["z_loss"] > 0
    rows, _ = rows_and_vectors(from_dict(spes(tmp_path, rounds=1,
                                              router_loss={"balance": 0, "z": 0})))
    assert "balance_loss" not in rows[0] and "z_loss" not in rows[0]
    assert math.isfinite(rows[0]["loss"])


# ---------------------------------------------------------------------------- churn, backends
def test_a_newcomer_holds_the_process_copy_of_the_global_experts(tmp_path):
    cfg = spes(tmp_path, n=5, rounds=3, sections={"churn": {
        "absent": [4], "events": [{"round": 2, "client": 4, "kind": "join"}]}})
    backend = local_engine(from_dict(cfg))
    for r in range(2):
        backend.run_round(r)
    group, frozen = backend.group, backend.group.shared.frozen
    assert frozen.holders[4] == -1  # absent: still the initial experts
    backend.run_round(2)
    assert set(frozen.versions) == {2} and frozen.holders[4] == 2
    vectors = group.vectors([0, 1, 2, 3, 4])
    for cid in range(1, 5):
        np.testing.assert_array_equal(vectors[cid], vectors[SERVER])
    backend.close()


class CountsVersions(WrapsBackend):
    """Wraps a local engine: how many versions of the experts its process holds after
    each round."""

    def __init__(self, backend):
        super().__init__(backend, -1)
        self.seen = set()

    def run_round(self, r):
        out = self.backend.run_round(r)
        self.seen.add(len(self.backend.group.shared.frozen.versions))
        return out


def test_lost_broadcasts_keep_old_versions_and_ray_equals_local(tmp_path, ray_session):
    base = spes(tmp_path, n=5, rounds=3, sections={"faults": {"drop": 0.3}})
    # one local run, watched and compared with the run on Ray (not one of each)
    local = CountsVersions(engine_for(from_dict(base)))
    local_rows, local_vectors = rows_and_vectors_on(local, from_dict(base))
    assert max(local.seen) > 1  # some worker missed a broadcast and kept its older experts
    # 2 actors (the server with workers 1 and 2; workers 3 and 4): messages cross between
    # actors as with 3, and each actor process started imports transformers (~5 s of CPU)
    ray_rows, ray_vectors = rows_and_vectors(from_dict(
        {**base, "backend": "ray", "ray": {"clients_per_actor": 3}}))
    assert ray_rows == local_rows
    for cid, vec in local_vectors.items():
        np.testing.assert_array_equal(ray_vectors[cid], vec)


def test_a_checkpoint_stores_the_frozen_experts_once_per_process(tmp_path):
    from decent.run.runner import run

    result = run(from_dict(spes(tmp_path, n=5, rounds=3,  # a checkpoint after round 1
                                sections={"checkpoint": {"every": 2}})))
    folder = result.run_dir / "checkpoint-000002"
    process = torch.load(folder / "process.pt", weights_only=False)
    versions = process["shared"]["__dataclass__"][1]["frozen"]["__dataclass__"][1]["versions"]
    assert list(versions) == [1]  # the broadcast of round 1: every expert, once
    assert len(versions[1]) == LAYERS * EXPERTS * 3
    backend = local_engine(from_dict(spes(tmp_path, n=5)))
    shared = backend.group.shared
    backend.close()
    for cid in range(1, 5):  # a worker: φ and its own experts only
        client = torch.load(folder / "clients" / f"{cid}.pt", weights_only=False)
        assert set(client["model"]) == set(shared.phi_names) | set(shared.own(cid))
    server = torch.load(folder / "clients" / "0.pt", weights_only=False)
    assert set(server["model"]) >= set(shared.all_experts())  # the global model's own copy


def test_a_robust_server_takes_the_rules_shared_update_and_each_expert_as_sent(tmp_path):
    """strategy.robust on SPES: the server's step on φ is the rule's Δφ (the median of the
    4 uploads here), the experts still their owners'. Round 0 of a mean run and of a
    median run see the same uploads: their broadcasts differ by mean(Δφ) − median(Δφ)."""
    import numpy as np

    from tests.helpers import first_round_messages

    def round_zero(rule):
        posted = first_round_messages(from_dict(spes(tmp_path, outer_lr=1.0,
                                                     outer_momentum=0.0, robust=rule)))
        uploads = [m.payload for m in posted if m.tag == "update"]
        broadcast = next(m.payload for m in posted if m.tag == "global")
        return uploads, broadcast

    uploads, mean_global = round_zero("mean")
    again, median_global = round_zero("median")
    phi = [n for n in uploads[0] if ".experts." not in n]
    assert phi and len(uploads) == 4
    for name in phi:
        stacked = np.stack([u[name].numpy() for u in uploads])
        np.testing.assert_array_equal(stacked, np.stack([u[name].numpy() for u in again]))
        expected = stacked.mean(0) - np.median(stacked, axis=0)
        np.testing.assert_allclose((median_global[name] - mean_global[name]).numpy(),
                                   expected, rtol=0, atol=1e-6)
    for name in (n for n in mean_global if ".experts." in n):  # as their owners sent them
        torch.testing.assert_close(median_global[name], mean_global[name], rtol=0, atol=0)
