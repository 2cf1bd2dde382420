"""DSO on two tiers: commitments (a forged payload is dropped, an attacked but committed one
is not), both aggregation levels against numpy on the payloads the router carried, the
error-feedback invariant through the worker pipeline, the privacy spent, epidemic
coverage, identical models everywhere, bad graphs, and local ≡ Ray."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from decent.backends.local import local_engine
from decent.compression.error_feedback import ErrorFeedback
from decent.compression.topk import TopKInt8
from decent.compression.tree import decompress_tree
from decent.core.errors import ConfigError
from decent.engine.config import from_dict
from decent.engine.plan import build_plan
from decent.models import params
from decent.privacy.gaussian import add_noise_, noise_std
from decent.strategies import dso_privacy
from decent.strategies.dso import expected_coverage_rounds, push_pull_coverage
from decent.tasks.base import ClientData
from tests.helpers import assert_ray_equals_local, rows_and_vectors, tiny


def dso(tmp_path, n=14, aggregators=4, rounds=2, sections=None, **strategy):
    return tiny(tmp_path, rounds=rounds,
                topology={"name": "two_tier", "n": n, "aggregators": aggregators},
                strategy={"name": "dso", "batch_size": 16, "lr": 0.1,
                          "compression": {"keep": 0.1},
                          "fanout": 2, "gossip_rounds": 2, "sensitivity_every": 5,
                          **strategy},
                model={"name": "mlp", "hidden": [16]},
                **{"eval": {"every": 1, "per_client": False}, **(sections or {})})


class Spy:
    """A LocalBackend and every message its router accepts."""

    def __init__(self, cfg):
        self.backend = local_engine(from_dict(cfg))
        self.sent = self.backend.record_messages()


def np_rule(rule, rows, beta=0.1):
    rows = np.asarray(rows, dtype=np.float64)
    if rule == "mean":
        return rows.mean(0)
    if rule == "median":
        return np.median(rows, axis=0)
    cut = min(int(np.ceil(beta * len(rows) - 1e-9)), (len(rows) - 1) // 2)
    return np.sort(rows, axis=0)[cut: len(rows) - cut].mean(0)


def dense(payload, like):
    """A payload of DSO's default Top-K over the whole gradient, decoded."""
    comp = TopKInt8(0.1, scope="global")
    return {n: t.double().numpy() for n, t in decompress_tree(comp, payload, like).items()}


@pytest.mark.parametrize(("rule", "top"), [("trimmed_mean", "mean"),
                                           ("median", "trimmed_mean"), ("mean", "median")])
def test_both_tiers_aggregate_exactly_what_the_router_carried(tmp_path, rule, top):
    # 3 aggregators of 11 workers each, so that β = 0.1 trims ⌈1.1⌉ = 2 values per side
    # (and ⌈0.3⌉ = 1 of the 3 aggregates per side: their median)
    spy = Spy(dso(tmp_path, n=36, aggregators=3, aggregator=rule, top_aggregator=top,
                  fanout=2))
    group = spy.backend.group
    theta0 = {n: p.detach().double().numpy().copy()
              for n, p in params.trainable_params(group.clients[0].model).items()}
    spy.backend.run_round(0)
    live = params.trainable_params(group.clients[0].model)
    tier = spy.backend.group.strategy.tier
    reveals = [m for m in spy.sent if m.tag == "reveal"]
    sets = {m.src: m.payload for m in spy.sent if m.tag == "set"}
    assert len(reveals) == 33 and set(sets) == {0, 1, 2}
    G = sets[0]
    assert sorted(G) == [0, 1, 2] and all(sets[a].keys() == G.keys() for a in sets)
    for a in range(3):  # level 1: the rule over the aggregator's workers' payloads
        rows = [dense(m.payload["update"], live) for m in reveals if tier[m.src] == a]
        assert len(rows) == 11
        got = dense(G[a], live)
        # over the whole gradient, its tensors in name order (the report's g ∈ R^d)
        local = np.concatenate([np_rule(rule, [r[name].reshape(-1) for r in rows])
                                for name in sorted(live)])
        # G[a] is that aggregate through Top-k + INT8: the kept entries agree to half an
        # INT8 step, and they are the largest-magnitude ones
        flat = np.concatenate([got[name].reshape(-1) for name in sorted(live)])
        kept = np.flatnonzero(flat)
        step = np.abs(local).max() / 127  # INT8's one scale: the largest kept magnitude
        assert len(kept) <= int(np.ceil(0.1 * flat.size))
        np.testing.assert_allclose(flat[kept], local[kept], atol=step / 2 + 1e-6)
        largest = int(np.argmax(np.abs(local)))  # always kept
        assert abs(flat[largest] - local[largest]) <= step / 2 + 1e-6
    # level 2: every client steps with the top rule over G's members
    members = [dense(G[a], live) for a in sorted(G)]
    for cid in (0, 1, 7, 35):
        now = params.trainable_params(group.clients[cid].model)
        for name in live:
            g = np_rule(top, [m[name].reshape(-1) for m in members]).reshape(theta0[name].shape)
            np.testing.assert_allclose(now[name].detach().double().numpy(),
                                       theta0[name] - 0.1 * g, atol=1e-6)
    spy.backend.close()


def test_a_forged_payload_is_dropped_and_a_committed_attack_is_not(tmp_path):
    byzantine = {"byzantine": [5, 9, 13]}
    rows, _ = rows_and_vectors(from_dict(dso(tmp_path, rounds=3, sections={
        "faults": {**byzantine, "attack": {"name": "forge"}}})))
    # 3 forgers over 4 aggregators, every round
    assert [r["rejected_payloads"] for r in rows] == [0.75] * 3
    rows, _ = rows_and_vectors(from_dict(dso(tmp_path, rounds=3, verify_commitments=False,
                                             sections={"faults": {
                                                 **byzantine, "attack": {"name": "forge"}}})))
    assert [r["rejected_payloads"] for r in rows] == [0.0] * 3
    for attack in ("sign_flip", "gaussian", "scale"):
        rows, _ = rows_and_vectors(from_dict(dso(tmp_path, rounds=2, sections={
            "faults": {**byzantine, "attack": {"name": attack}}})))
        assert [r["rejected_payloads"] for r in rows] == [0.0] * 2, attack


def test_a_committed_attack_changes_the_gradient_before_compression(tmp_path):
    cfg = dso(tmp_path, rounds=1, sections={"faults": {"byzantine": [5],
                                                        "attack": {"name": "sign_flip"}}})
    honest = Spy(dso(tmp_path, rounds=1))
    attacked = Spy(cfg)
    honest.backend.run_round(0)
    attacked.backend.run_round(0)
    h = {m.src: m.payload["update"] for m in honest.sent if m.tag == "reveal"}
    a = {m.src: m.payload["update"] for m in attacked.sent if m.tag == "reveal"}
    for name in h[5]:  # the same entries kept, every value negated
        assert torch.equal(a[5][name]["idx"], h[5][name]["idx"])
        assert torch.equal(a[5][name]["scale"], h[5][name]["scale"])
        assert torch.equal(a[5][name]["q"], -h[5][name]["q"])
        assert torch.equal(a[6][name]["q"], h[6][name]["q"])  # honest workers unchanged
    honest.backend.close()
    attacked.backend.close()


def test_error_feedback_keeps_the_workers_whole_signal(tmp_path):
    backend = local_engine(from_dict(dso(tmp_path, rounds=4, dp={"enabled": True})))
    worker = backend.group.clients[6]
    fed, got = [], []
    original = ErrorFeedback.compress

    def spy(self, tensors, weights=None):
        out = original(self, tensors, weights)
        if self is worker.state.feedback:
            fed.append({n: t.double().clone() for n, t in tensors.items()})
            got.append({n: t.double() for n, t in
                        decompress_tree(self.compressor, out, tensors).items()})
        return out

    ErrorFeedback.compress = spy
    try:
        for r in range(4):
            backend.run_round(r)
    finally:
        ErrorFeedback.compress = original
    assert len(fed) == 4
    for name in fed[0]:  # Σ sent (clipped, noised) = Σ decompressed + the residual
        total = sum(f[name] for f in fed)
        np.testing.assert_allclose(
            (sum(g[name] for g in got) + worker.state.feedback.memory[name].double()).numpy(),
            total.numpy(), atol=1e-5)
    backend.close()


def dp_run(tmp_path, **strategy):
    """A DSO run with DP: its metric rows and its summary.json as written."""
    import json

    from decent.run.runner import run

    result = run(from_dict(dso(tmp_path, dp={"enabled": True}, **strategy)))
    return result.rows, json.loads((result.run_dir / "summary.json").read_text())


def test_the_privacy_spent_is_the_accountants_for_the_noise_used(tmp_path):
    from dp_accounting import dp_event, rdp

    rows, summary = dp_run(tmp_path, rounds=3)
    backend = local_engine(from_dict(dso(tmp_path)))
    sizes = sorted({len(c.data) for c in backend.group.clients.values() if c.data is not None})
    backend.close()
    # DP-SGD: Σ clipped / B + N(0, σ²) is a sum of add/remove sensitivity C = 1 with noise
    # σ·B, on a Poisson sample at rate B/|D|: one event per release, fed to the accountant
    sigma, B = noise_std(1.0, 8.0, 1e-6, 10), 16  # N = the 10 workers
    accountants = {size: rdp.RdpAccountant() for size in sizes}
    for row in rows:
        worst = 0.0
        for size, accountant in accountants.items():
            accountant.compose(dp_event.PoissonSampledDpEvent(
                B / size, dp_event.GaussianDpEvent(sigma * B / 1.0)))
            worst = max(worst, accountant.get_epsilon(1e-6))
        assert row["dp_epsilon"] == pytest.approx(worst, rel=1e-12)
    assert rows[0]["dp_epsilon"] < rows[-1]["dp_epsilon"]
    assert summary["dp_epsilon"] == rows[-1]["dp_epsilon"]  # every worker, every round
    assert "dp_epsilon_note" not in summary  # nothing it leaves out


def test_with_every_worker_byzantine_the_summary_says_why_there_is_no_epsilon(tmp_path):
    # 2 aggregators and 4 workers, all attacking: no honest release to account for
    rows, summary = dp_run(tmp_path, n=6, aggregators=2, rounds=1, sections={
        "faults": {"byzantine": [2, 3, 4, 5], "attack": {"name": "scale"}}})
    assert "dp_epsilon" not in summary and all("dp_epsilon" not in r for r in rows)
    assert "every worker is Byzantine" in summary["dp_epsilon_note"]
    # forgers commit to their honest, noised release: still covered
    _, forged = dp_run(tmp_path, n=6, aggregators=2, rounds=1, sections={
        "faults": {"byzantine": [2, 3], "attack": {"name": "forge"}}})
    assert forged["dp_epsilon"] > 0 and "dp_epsilon_note" not in forged


def test_a_resumed_dp_run_goes_on_spending_from_its_checkpointed_ledgers(tmp_path):
    import shutil

    from decent.run.runner import resume, run

    cfg = from_dict(dso(tmp_path, rounds=3, dp={"enabled": True}, sections={
        "checkpoint": {"every": 2}}))
    full = run(cfg)  # a checkpoint after round 1: round 2 runs again on resume
    stopped = full.run_dir.parent / f".{full.run_dir.name}-killed.partial"
    shutil.copytree(full.run_dir, stopped)
    (stopped / "summary.json").unlink()  # as a run killed after its last round
    resumed = resume(stopped)
    assert [r["dp_epsilon"] for r in resumed.rows] == [r["dp_epsilon"] for r in full.rows]
    assert resumed.summary["dp_epsilon"] == full.summary["dp_epsilon"]


def test_a_rejoining_worker_keeps_its_privacy_ledger(tmp_path):
    backend = local_engine(from_dict(dso(tmp_path, rounds=2, dp={"enabled": True})))
    backend.run_round(0)
    ledger = backend.group.clients[6].state.ledger
    assert ledger.steps == 1
    backend.group.bootstrap(6, None)  # as a worker that left and came back
    assert backend.group.clients[6].state.ledger is ledger
    backend.run_round(1)
    assert ledger.steps == 2
    backend.close()


def test_epidemic_gossip_covers_every_aggregator_in_log_f_rounds(tmp_path):
    assert expected_coverage_rounds(16, 4) == 2 and expected_coverage_rounds(8, 2) == 3
    A, R, rounds = 16, 3, 3
    spy = Spy(dso(tmp_path, n=48, aggregators=A, rounds=rounds, fanout=4, gossip_rounds=R))
    phases = len(spy.backend.strategy.phases(0))
    for r in range(rounds):
        spy.sent.clear()
        stats, _ = spy.backend.run_round(r)
        # an independent replay of the exchange from the messages the router carried:
        # G_a after gossip round k = {a} ∪ every set delivered to a in phases 2 .. 2k + 1
        # (round k's pushes go out in phase 2k, their answers in 2k + 1)
        for k in range(1, R + 1):
            held = []
            for a in range(A):
                gathered = {a}
                for m in spy.sent:
                    step = m.sent_phase - r * phases
                    if m.dst == a and m.tag in ("push", "reply") and 2 <= step <= 2 * k + 1:
                        gathered |= set(m.payload)
                held.append(len(gathered) / A)
                assert stats[a][f"coverage_{k}"] == len(gathered) / A
            if k == expected_coverage_rounds(A, 4):  # ⌈log_4 16⌉ = 2: w.h.p. (nearly) all
                assert np.mean(held) >= 0.9
        assert all(stats[a][f"coverage_{R}"] == 1.0 for a in range(A))
        # one push-pull round reaches at least the f = 4 peers an aggregator pushed to
        pushed = {a: {m.dst for m in spy.sent if m.src == a and m.tag == "push"
                      and m.sent_phase - r * phases == 2} for a in range(A)}
        assert all(len(p) == 4 for p in pushed.values())
    spy.backend.close()
    rows, _ = rows_and_vectors(from_dict(dso(tmp_path, n=48, aggregators=A, rounds=2,
                                             fanout=4, gossip_rounds=R)))
    assert all(row["consensus_distance"] == 0.0 for row in rows)  # the same step everywhere


def test_dso_needs_a_two_tier_graph(tmp_path):
    with pytest.raises(ConfigError) as err:
        build_plan(from_dict({**dso(tmp_path), "topology": {"name": "ring", "n": 8}}))
    assert err.value.field == "topology.name"


def test_dso_on_ray_equals_local(tmp_path, ray_session):
    # 2 actors, the aggregators with workers 4–6 and workers 7–13 (one actor process less
    # to start than 3 of 5): every upload of the second crosses between actors, the
    # Byzantine one's too (worker 8, at speed 0.5 as worker 5 was with 5 per actor)
    base = dso(tmp_path, rounds=3, dp={"enabled": True}, asynchronous=True,
               sections={"faults": {"byzantine": [8], "attack": {"name": "gaussian"},
                                    "drop": 0.1},
                         **timed([1.0, 0.5, 0.3] * 3 + [1.0])})
    assert_ray_equals_local(base, clients_per_actor=7)


@pytest.mark.parametrize(("compression", "scope"), [
    ("identity", None), ("topk", "per_tensor"), ("topk_int8", "per_tensor"),
    ("topk", "global"), ("topk_int8", "global")])
def test_a_workers_upload_is_the_closed_form(tmp_path, compression, scope):
    import math

    # identity keeps all; a Top-K keeps 5 % of each tensor, or of the whole gradient
    keep = {} if compression == "identity" else {"keep": 0.05, "scope": scope}
    spy = Spy(dso(tmp_path, rounds=1, compression={"name": compression, **keep}))
    spy.backend.run_round(0)
    sizes = [p.numel() for p in params.trainable_params(
        spy.backend.group.clients[0].model).values()]
    spy.backend.close()
    ks = [max(1, math.ceil(0.05 * s)) for s in (sizes if scope == "per_tensor"
                                                else [sum(sizes)])]
    payload = {"identity": 4 * sum(sizes), "topk": sum(8 * k for k in ks),
               "topk_int8": sum(5 * k + 4 for k in ks)}[compression]
    for worker in range(4, 14):  # 32 B commitment, then 16 B nonce + the payload
        mine = [m for m in spy.sent if m.src == worker]
        assert sorted(m.nbytes for m in mine) == sorted([32, 16 + payload])


# the asynchronous option: 4 aggregators at reference speed, 10 workers of these speeds
WORKER_SPEEDS = [1.0, 0.5, 0.4, 0.3, 1.5, 0.9, 0.25, 1.0, 0.6, 0.34]
PERIODS = [1, 2, 3, 4, 1, 2, 4, 1, 2, 3]  # ⌈1/s⌉ ticks per gradient, capped below at 1


def timed(speeds, **modelled):
    return {"compute": {"mode": "modelled", "speeds": [1.0] * 4 + speeds,
                        "flops_per_step": 1e12, "device_tflops": 1.0, **modelled}}


def test_asynchronous_workers_reveal_every_period_with_their_gradients_age(tmp_path):
    rounds = 9
    spy = Spy(dso(tmp_path, rounds=rounds, asynchronous=True,
                  sections=timed(WORKER_SPEEDS)))
    staleness = []
    for r in range(rounds):
        spy.sent.clear()
        stats, _ = spy.backend.run_round(r)
        reveals = {m.src: m for m in spy.sent if m.tag == "reveal"}
        commits = {m.src for m in spy.sent if m.tag == "commit"}
        due = {4 + i for i, p in enumerate(PERIODS) if (r + 1) % p == 0}
        assert set(reveals) == commits == due, r  # a worker speaks once its gradient is done
        ages = []
        for w, msg in reveals.items():  # taken p − 1 ticks ago, on the model of that step
            assert int(msg.payload["step"][0]) == r - PERIODS[w - 4] + 1
            ages.append(PERIODS[w - 4] - 1)
        staleness.append(ages)
        got = [stats[a]["staleness"] for a in range(4)]
        assert sum(s.total for s in got) == sum(ages) and sum(s.count for s in got) == len(ages)
    spy.backend.close()
    rows, _ = rows_and_vectors(from_dict(dso(tmp_path, rounds=rounds, asynchronous=True,
                                             sections=timed(WORKER_SPEEDS))))
    for row, ages in zip(rows, staleness, strict=True):
        assert row["staleness"] == pytest.approx(np.mean(ages), rel=1e-12)
        assert row["staleness_count"] == len(ages)
        # a tick lasts as long as the slowest worker's share of its gradient: 1/(p·s) s
        assert row["sim_compute_s"] == pytest.approx(
            max(1 / (p * s) for p, s in zip(PERIODS, WORKER_SPEEDS, strict=True)), rel=1e-12)
    flat = [a for ages in staleness for a in ages]
    from decent.run.summary import summarize_rows

    summary = summarize_rows(from_dict(dso(tmp_path, rounds=rounds)), rows, 0.0, "x")
    assert summary["staleness_run"] == pytest.approx(np.mean(flat), rel=1e-12)
    # synchronous, the same fleet waits for its slowest worker every round
    rows, _ = rows_and_vectors(from_dict(dso(tmp_path, rounds=2,
                                             sections=timed(WORKER_SPEEDS))))
    assert [r["sim_compute_s"] for r in rows] == pytest.approx([1 / 0.25] * 2, rel=1e-12)
    assert "staleness" not in rows[0]


def test_asynchronous_at_reference_speed_is_the_synchronous_method(tmp_path):
    fleet = timed([1.0] * 5 + [2.0] * 5)
    sync_rows, sync_vectors = rows_and_vectors(from_dict(dso(tmp_path, rounds=3,
                                                             sections=fleet)))
    rows, vectors = rows_and_vectors(from_dict(dso(tmp_path, rounds=3, asynchronous=True,
                                                   sections=fleet)))
    assert all(np.array_equal(vectors[c], sync_vectors[c]) for c in vectors)
    for a, s in zip(rows, sync_rows, strict=True):
        assert a["staleness"] == 0.0 and a["gmp_loss"] == s["gmp_loss"]
        assert a["bytes"] == s["bytes"] + 8 * 10  # each reveal's int64 step


# ---------------------------------------------------------------- fidelity to the report
def test_with_dp_the_kept_indices_do_not_depend_on_the_workers_private_data(tmp_path):
    # the entries a worker keeps travel un-noised: with DP they may depend on the noised
    # gradient and on public data only. The same gradient, compressed by worker 6 once with
    # its own shard and once with worker 9's in its place, keeps the same entries.
    from types import SimpleNamespace

    backend = local_engine(from_dict(dso(tmp_path, rounds=1, dp={"enabled": True})))
    group = backend.group
    worker, other = group.clients[6], group.clients[9]
    ctx = SimpleNamespace(task=group.task)
    g = {n: torch.randn(p.shape, generator=torch.Generator().manual_seed(1))
         for n, p in params.trainable_params(worker.model).items()}
    kept = []
    for shard in (worker.data, other.data):
        worker.data = shard
        s = group.strategy.probe_sensitivity(worker, ctx)
        payload = ErrorFeedback(TopKInt8(0.1)).compress({n: t.clone() for n, t in g.items()}, s)
        kept.append({n: payload[n]["idx"] for n in g})
    backend.close()
    for name in g:
        assert torch.equal(kept[0][name], kept[1][name]), name


def test_dp_refuses_a_private_probe_in_one_line(tmp_path):
    with pytest.raises(ConfigError) as err:
        build_plan(from_dict(dso(tmp_path, probe="private", dp={"enabled": True})))
    assert err.value.field == "strategy.probe" and "DP" in err.value.message
    build_plan(from_dict(dso(tmp_path, probe="private")))  # without DP it is allowed
    build_plan(from_dict(dso(tmp_path, probe="private", semantic=False, dp={"enabled": True})))


def test_a_byzantine_workers_payload_is_its_attack_unclipped_and_un_noised(tmp_path,
                                                                           monkeypatch):
    # DP with a clip far below the gradient's norm: honest workers send a clipped, noised
    # gradient; the attacker (worker 5, scaling by −4) sends −4 × its raw gradient, which an
    # honest run without DP — the same batch from the same generator — sends unscaled
    clip = 0.01
    raw = Spy(dso(tmp_path, rounds=1, compression={"name": "identity"}))
    attacked = Spy(dso(tmp_path, rounds=1, compression={"name": "identity"},
                       dp={"enabled": True, "clip": clip},
                       sections={"faults": {"byzantine": [5],
                                            "attack": {"name": "scale", "factor": -4.0}}}))
    raw.backend.run_round(0)
    # the honest workers' updates just before their noise, and their samples' sizes
    clients = attacked.backend.group.clients
    pre_noise, sampled = {}, {}

    def owner(generator):
        return next(c for c in clients if clients[c].generator is generator)

    def noised(tensors, std, generator):
        pre_noise[owner(generator)] = {n: t.clone() for n, t in tensors.items()}
        add_noise_(tensors, std, generator)

    poisson = ClientData.poisson_sample

    def counted(data, rate, generator):
        batch = poisson(data, rate, generator)
        sampled[owner(generator)] = len(batch[1])
        return batch

    monkeypatch.setattr(dso_privacy, "add_noise_", noised)
    monkeypatch.setattr(ClientData, "poisson_sample", counted)
    attacked.backend.run_round(0)
    monkeypatch.undo()
    assert 5 not in pre_noise and 5 not in sampled  # the attacker draws no Poisson sample
    g = {m.src: {n: t["dense"] for n, t in m.payload["update"].items()}
         for m in raw.sent if m.tag == "reveal"}
    a = {m.src: {n: t["dense"] for n, t in m.payload["update"].items()}
         for m in attacked.sent if m.tag == "reveal"}
    norm = np.sqrt(sum(float(t.double().square().sum()) for t in g[5].values()))
    assert norm > 10 * clip
    for name in g[5]:
        torch.testing.assert_close(a[5][name], -4.0 * g[5][name], rtol=0, atol=0)
    # an honest worker: Σ clip(∇ loss_i) / B + N(0, σ²) — the residual has the noise's scale
    sigma = noise_std(clip, 8.0, 1e-6, 10)
    residual = torch.cat([(a[6][n].double() - pre_noise[6][n].double()).reshape(-1)
                          for n in g[6]])
    assert float(residual.std()) == pytest.approx(sigma, rel=0.1)
    # each of its sampled examples contributed at most C / B
    norm6 = np.sqrt(sum(float(t.double().square().sum()) for t in pre_noise[6].values()))
    assert norm6 <= clip * sampled[6] / 16 * (1 + 1e-6)
    raw.backend.close()
    attacked.backend.close()
    rows, summary = dp_run(tmp_path, rounds=1, sections={
        "faults": {"byzantine": [5], "attack": {"name": "scale"}}})
    assert rows[0]["dp_epsilon"] > 0  # the honest workers' spending is still reported
    assert summary["dp_epsilon"] == rows[0]["dp_epsilon"]
    assert "honest workers only" in summary["dp_epsilon_note"] and "[5]" in \
        summary["dp_epsilon_note"]


def test_push_pull_coverage_closed_form():
    A, f = 16, 4
    # round 1 by hand: b holds ĝ_a iff a pushed to b or b pulled from a, each with
    # probability f/(A − 1), independently
    one = (1 + (A - 1) * (1 - (1 - f / (A - 1)) ** 2)) / A
    assert push_pull_coverage(A, f, 3)[0] == pytest.approx(one, abs=1e-12)
    assert push_pull_coverage(A, f, 3) == pytest.approx([0.4958, 0.9969, 1.0], abs=1e-4)
    assert push_pull_coverage(2, 1, 2) == [1.0, 1.0]
    # A = 3, f = 1, one round: b misses ĝ_a iff a pushed elsewhere and b pulled elsewhere
    assert push_pull_coverage(3, 1, 1)[0] == pytest.approx((1 + 2 * (1 - 0.25)) / 3)


@pytest.mark.parametrize(("A", "f", "R", "rounds"), [(16, 4, 3, 24), (8, 2, 3, 30)])
def test_gossip_coverage_per_round_is_the_push_pull_closed_form(tmp_path, A, f, R, rounds):
    backend = local_engine(from_dict(dso(tmp_path, n=2 * A, aggregators=A, rounds=rounds,
                                         fanout=f, gossip_rounds=R,
                                         sections={"eval": {"every": 1000}})))
    per_round = {k: [] for k in range(1, R + 1)}
    for r in range(rounds):
        stats, _ = backend.run_round(r)
        for k in per_round:  # the mean over aggregators: E[n_k]/A for any one ĝ
            per_round[k].append(np.mean([stats[a][f"coverage_{k}"] for a in range(A)]))
    backend.close()
    expected = push_pull_coverage(A, f, R)
    for k, values in per_round.items():
        # rounds are independent draws: within 4 standard errors (and a floor for the
        # rounds that are nearly always complete)
        se = np.std(values, ddof=1) / np.sqrt(len(values))
        assert abs(np.mean(values) - expected[k - 1]) <= 4 * se + 2e-3, (k, np.mean(values))


def test_weighted_top_aggregator_weighs_each_aggregate_by_the_payloads_it_used(tmp_path):
    # 4 aggregators over 10 workers (tiers by latency, unequal), worker 5 forging: its
    # payload fails verification and does not count for its aggregator
    spy = Spy(dso(tmp_path, top_aggregator="weighted_mean", gossip_rounds=3,
                  sections={"faults": {"byzantine": [5], "attack": {"name": "forge"}}}))
    group = spy.backend.group
    theta0 = {n: p.detach().double().numpy().copy()
              for n, p in params.trainable_params(group.clients[0].model).items()}
    spy.backend.run_round(0)
    live = params.trainable_params(group.clients[0].model)
    tier = group.strategy.tier
    served = {a: sum(1 for m in spy.sent if m.tag == "reveal" and m.dst == a and m.src != 5)
              for a in range(4)}
    assert len(set(served.values())) > 1  # unequal tiers, or the test shows nothing
    assert served[tier[5]] == sum(1 for w in range(4, 14) if tier[w] == tier[5]) - 1
    G = next(m.payload for m in spy.sent if m.tag == "set")
    assert sorted(G) == [a for a in range(4) if served[a]]
    total = sum(served[a] for a in G)
    for cid in (0, 3, 6, 13):
        now = params.trainable_params(group.clients[cid].model)
        for name in live:
            g = sum(served[a] / total * dense(G[a], live)[name] for a in G)
            np.testing.assert_allclose(now[name].detach().double().numpy(),
                                       theta0[name] - 0.1 * g, atol=1e-6)
    spy.backend.close()
