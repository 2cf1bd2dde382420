"""Robust aggregation for every gossip and server method (``strategy.robust``): the rules
against independent references (ByzFL's where it has the rule, else numpy written from the
paper or the authors' code), the neighbourhood rules inside DSGD, GASLoC and FedAvg end
to end under attack, batched ≡ sequential, and the one-line refusals."""

from __future__ import annotations

import importlib.util
import sys
import types

import numpy as np
import pytest
import torch

from decent.core.errors import ConfigError
from decent.engine.config import from_dict
from decent.robust import aggregators as agg
from decent.robust.neighbourhood import robust_average
from decent.run.runner import check
from tests.helpers import (
    assert_ray_equals_local,
    assert_resumed_equals_full,
    rows_and_vectors,
    tiny,
)


def byzfl_aggregators():
    """ByzFL's aggregators module, loaded without the package's ``__init__`` (which
    imports torchvision for its training framework)."""
    if "byzfl.aggregators.aggregators" not in sys.modules:
        spec = importlib.util.find_spec("byzfl")
        if spec is None:
            pytest.fail("byzfl is not installed: make install installs it (--no-deps)")
        package = types.ModuleType("byzfl")
        package.__path__ = list(spec.submodule_search_locations)
        sys.modules["byzfl"] = package
    return importlib.import_module("byzfl.aggregators.aggregators")


def vectors(m: int = 9, d: int = 40, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(m, d))
    x[: m // 4] = 50 * rng.normal(size=(m // 4, d)) + 20  # a few far off
    return x


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rules_equal_byzfl_on_random_inputs(seed):
    byzfl = byzfl_aggregators()
    x = vectors(seed=seed)
    stacked = torch.from_numpy(x)
    m = len(x)
    beta = 0.2
    f = agg.assumed_byzantine(beta, m)
    cases = {
        "median": (agg.median(stacked), byzfl.Median()(x)),
        "trimmed_mean": (agg.trimmed_mean(stacked, beta), byzfl.TrMean(f)(x)),
        "geometric_median": (agg.geometric_median(stacked, iters=5, nu=0.1),
                             byzfl.GeometricMedian(nu=0.1, T=5)(x)),
        "centered_clip": (agg.centered_clip(stacked, tau=3.0, iters=3),
                          byzfl.CenteredClipping(L=3, tau=3.0)(x)),
        "mean": (agg.mean(stacked), byzfl.Average()(x)),
    }
    for name, (ours, theirs) in cases.items():
        np.testing.assert_allclose(ours.numpy(), theirs, rtol=0, atol=1e-6, err_msg=name)


def krum_reference(x: np.ndarray, f: int) -> tuple[int, np.ndarray]:
    """Blanchard et al. (2017): score(i) = Σ of the squared distances to its n − f − 2
    nearest others; Krum the argmin, multi-Krum the mean of the n − f best."""
    n = len(x)
    d2 = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    scores = np.array([np.sort(np.delete(d2[i], i))[: n - f - 2].sum() for i in range(n)])
    order = np.argsort(scores, kind="stable")
    return int(order[0]), x[order[: n - f]].mean(axis=0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_krum_and_multi_krum_equal_the_paper(seed):
    # ByzFL's Krum counts n − f − 1 neighbours, the paper n − f − 2: the paper decides
    x = vectors(m=11, seed=seed)
    f = agg.assumed_byzantine(0.2, len(x))
    best, multi = krum_reference(x, f)
    np.testing.assert_array_equal(agg.krum(torch.from_numpy(x), 0.2).numpy(), x[best])
    np.testing.assert_allclose(agg.multi_krum(torch.from_numpy(x), 0.2).numpy(), multi,
                               rtol=0, atol=1e-9)


def clipped_gossip_reference(own, received, weights, keep, byzantine=1, tau=None):
    """The authors' SelfCenteredClipping (epfml/byzantine-robust-decentralized-optimizer,
    codes/aggregator.py): w_ii x_i + Σ_j w_ij (x_i + clip(x_j − x_i, τ)), τ the second
    largest distance when unset (b = 1)."""
    dist = [np.linalg.norm(r - own) for r in received]
    if tau is None:
        tau = sorted(dist)[-(byzantine + 1)] if len(dist) > byzantine else sorted(dist)[-1]
    out = keep * own
    for r, w, dd in zip(received, weights, dist, strict=True):
        out = out + w * (own + (r - own) * min(1.0, tau / dd))
    return out


def as_tensors(v: np.ndarray) -> dict[str, torch.Tensor]:
    t = torch.from_numpy(v.astype(np.float64))
    return {"w": t[:30].reshape(5, 6), "b": t[30:]}


@pytest.mark.parametrize("tau", [None, 2.0])
def test_clipped_gossip_equals_the_authors_rule(tau):
    rng = np.random.default_rng(3)
    own, received = rng.normal(size=36), rng.normal(size=(4, 36)) * [[1], [2], [3], [40]]
    weights = [0.2, 0.2, 0.15, 0.2]
    keep = 1 - sum(weights)
    cfg = agg.ClippedGossipConfig(tau=tau)
    out = robust_average(cfg, as_tensors(own), keep, dict(enumerate(weights)),
                         {j: as_tensors(r) for j, r in enumerate(received)})
    flat = torch.cat([out["w"].reshape(-1), out["b"]]).numpy()
    np.testing.assert_allclose(flat, clipped_gossip_reference(own, received, weights, keep,
                                                              tau=tau), rtol=0, atol=1e-12)


def test_a_neighbourhood_rule_runs_over_the_client_and_what_it_heard():
    rng = np.random.default_rng(4)
    own, received = rng.normal(size=36), rng.normal(size=(4, 36))
    out = robust_average(agg.AGGREGATORS.config("median", "strategy.robust"),
                         as_tensors(own), 0.2, dict.fromkeys(range(4), 0.2),
                         {j: as_tensors(r) for j, r in enumerate(received)})
    flat = torch.cat([out["w"].reshape(-1), out["b"]]).numpy()
    np.testing.assert_allclose(flat, np.median(np.vstack([own, received]), axis=0), atol=1e-12)
    assert out["w"].dtype == torch.float64 and out["w"].shape == (5, 6)


def attacked(tmp_path, strategy: dict, robust, topology: dict, mode: str = "sequential",
             attack: str = "sign_flip"):
    return from_dict(tiny(tmp_path, rounds=30, topology=topology,
                          strategy={**strategy, "robust": robust},
                          faults={"byzantine": [1, 5], "attack": {"name": attack}},
                          eval={"every": 0, "per_client": False},
                          execution={"mode": mode}))


DSGD = {"name": "dsgd", "local_steps": 3, "lr": 0.1}
GASLOC = {"name": "gasloc", "local_steps": 3, "lr": 0.05, "optimizer": "sgd"}
FEDAVG = {"name": "fedavg", "local_steps": 3, "lr": 0.1}
SGP = {"name": "sgp", "local_steps": 3, "lr": 0.1}
CHOCO = {"name": "choco", "local_steps": 3, "lr": 0.1, "compression": {"name": "topk",
                                                                       "keep": 0.2}}
COMBO = {"name": "combo", "local_steps": 3, "batch_size": 8, "lr": 0.1, "segments": 3,
         "replicas": 2}
RING = {"name": "ring", "n": 8}
DIRECTED = {"name": "directed_exponential", "n": 8}


@pytest.mark.parametrize(("strategy", "rule", "topology", "attack"), [
    (DSGD, "clipped_gossip", RING, "sign_flip"), (DSGD, "trimmed_mean", RING, "sign_flip"),
    (GASLOC, "clipped_gossip", RING, "sign_flip"),
    (FEDAVG, "median", {"name": "star", "n": 8}, "scale"),
    (SGP, "clipped_gossip", DIRECTED, "sign_flip"), (CHOCO, "trimmed_mean", RING, "scale"),
    (COMBO, "clipped_gossip", RING, "sign_flip"),
], ids=["dsgd-clipped", "dsgd-trimmed", "gasloc-clipped", "fedavg-median", "sgp-clipped",
        "choco-trimmed", "combo-clipped"])
def test_a_robust_rule_defends_where_the_mean_is_broken(tmp_path, strategy, rule, topology,
                                                        attack):
    """Two attacking clients of eight: the plain average is dragged off (to chance, 0.11
    on digits), the robust rule keeps the honest clients learning."""
    mean_rows, _ = rows_and_vectors(attacked(tmp_path, strategy, "mean", topology,
                                             attack=attack))
    robust_rows, _ = rows_and_vectors(attacked(tmp_path, strategy, rule, topology,
                                               attack=attack))
    assert robust_rows[-1]["gmp_accuracy"] > mean_rows[-1]["gmp_accuracy"] + 0.2


@pytest.mark.parametrize(("strategy", "topology"), [(DSGD, RING), (SGP, DIRECTED),
                                                    (CHOCO, RING)], ids=["dsgd", "sgp", "choco"])
def test_batched_robust_gossip_equals_sequential(tmp_path, strategy, topology):
    seq_rows, seq = rows_and_vectors(attacked(tmp_path, strategy, "clipped_gossip", topology))
    bat_rows, bat = rows_and_vectors(attacked(tmp_path, strategy, "clipped_gossip", topology,
                                              "batched"))
    for a, b in zip(seq_rows, bat_rows, strict=True):
        for key, value in a.items():
            if key != "round_wall_s":
                assert b[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    for cid, vec in seq.items():
        np.testing.assert_allclose(bat[cid], vec, rtol=0, atol=1e-6)


@pytest.mark.parametrize("strategy", [CHOCO, SGP], ids=["choco", "sgp"])
def test_a_resumed_robust_run_is_the_run_that_never_stopped(tmp_path, strategy):
    """Choco's copies of its neighbours' public models, and push-sum's reset weight, are
    in the checkpoint: resumed from round 4 of 5, the run goes on bit for bit."""
    topology = DIRECTED if strategy is SGP else RING
    raw = tiny(tmp_path, rounds=5, topology=topology,
               strategy={**strategy, "robust": "clipped_gossip"},
               faults={"byzantine": [1, 5], "attack": {"name": "sign_flip"}},
               checkpoint={"every": 2})
    assert_resumed_equals_full(from_dict(raw))


def test_the_mean_is_the_method_as_published(tmp_path):
    plain = from_dict(tiny(tmp_path, rounds=3, strategy=DSGD))
    rows, vecs = rows_and_vectors(plain)
    rows_mean, vecs_mean = rows_and_vectors(from_dict(tiny(
        tmp_path, rounds=3, strategy={**DSGD, "robust": {"name": "mean"}})))
    assert [{k: v for k, v in r.items() if k != "round_wall_s"} for r in rows] == \
        [{k: v for k, v in r.items() if k != "round_wall_s"} for r in rows_mean]
    for cid in vecs:
        np.testing.assert_array_equal(vecs[cid], vecs_mean[cid])


def test_a_rule_that_cannot_run_is_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError) as err:
        check(from_dict(tiny(tmp_path, topology=RING, strategy={**DSGD, "robust": "krum"})))
    assert err.value.field == "strategy.robust" and "2f + 2" in str(err.value)
    with pytest.raises(ConfigError) as err:
        check(from_dict(tiny(tmp_path, topology={"name": "star", "n": 8},
                             strategy={**FEDAVG, "robust": "clipped_gossip"})))
    assert err.value.field == "strategy.robust" and "centered_clip" in str(err.value)
    # Krum on a server of 7 uploads: f = ⌈0.1·7⌉ = 1, 7 > 4, so it runs
    check(from_dict(tiny(tmp_path, topology={"name": "star", "n": 8},
                         strategy={**FEDAVG, "robust": "krum"})))


def test_robust_gossip_and_server_on_ray_equal_local(tmp_path, ray_session):
    """Clipped gossip (DSGD, batched, actors of 3 and 3 and 2) and a median server
    (FedAvg): the local run's rows and every client's final model, bit for bit."""
    for strategy, rule, topology, mode in [
            (DSGD, "clipped_gossip", RING, "batched"),
            (FEDAVG, "median", {"name": "star", "n": 8}, "sequential")]:
        base = tiny(tmp_path, rounds=3, topology=topology, strategy={**strategy, "robust": rule},
                    faults={"byzantine": [1, 5], "attack": {"name": "sign_flip"}},
                    execution={"mode": mode})
        assert_ray_equals_local(base, 3)


def test_honest_only_evaluates_the_honest_clients_alone(tmp_path):
    """eval.honest_only: the averaged model and the per-client figures over the clients
    not in faults.byzantine: what evaluating just those clients gives."""
    from decent.run.runner import make_engine

    cfg = attacked(tmp_path, DSGD, "mean", RING)
    cfg.eval.per_client = True
    cfg.eval.honest_only = True
    engine = make_engine(cfg, check(cfg))
    try:
        engine.run_round(0)
        honest = [c for c in range(8) if c not in (1, 5)]
        assert engine.evaluate(True) == engine.evaluate(True, honest)
        cfg.eval.honest_only = False
        assert engine.evaluate(True) != engine.evaluate(True, honest)
    finally:
        engine.close()


def test_the_schema_labels_a_rules_fields_under_the_key_a_user_writes(capsys):
    from decent.tools.cli import main

    assert main(["config", "schema", "aggregator.clipped_gossip"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("strategy.robust.name ") and "\nstrategy.robust.tau " in out
    assert main(["config", "schema", "strategy.dso"]) == 0
    dso = capsys.readouterr().out
    assert "decent config schema aggregator.NAME; in this section under aggregator" in dso
