"""Omniscient attacks (ALIE, IPM, dissensus): each Byzantine payload a run routes equals a
numpy reference computed from the honest payloads of the same phase, ALIE and IPM equal
ByzFL's on random inputs, z_max is the paper's, and a run is the same on Ray."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import norm

from decent.core.errors import ConfigError
from decent.engine.config import from_dict
from decent.robust.omniscient import ALIEConfig, IPMConfig, View, _alie, _ipm, alie_z
from decent.run.runner import check
from tests.helpers import assert_ray_equals_local, first_round_messages, tiny
from tests.test_robust_gossip import byzfl_aggregators

BYZANTINE = (1, 5)
ROOT = Path(__file__).resolve().parents[1]


def byzfl_attacks():
    byzfl_aggregators()  # the package stub
    import importlib

    return importlib.import_module("byzfl.attacks.attacks")


@pytest.mark.parametrize("seed", [0, 1])
def test_alie_and_ipm_equal_byzfl(seed):
    attacks = byzfl_attacks()
    honest = np.random.default_rng(seed).normal(size=(6, 25))
    view = View(None, {k: [torch.from_numpy(v)] for k, v in enumerate(honest)}, {},
                frozenset(), 8, 2)
    # ByzFL writes ALIE as μ + τσ: the paper's μ − zσ is τ = −z
    [ours] = _alie(ALIEConfig(z=1.5), view)
    np.testing.assert_allclose(ours, attacks.ALittleIsEnough(tau=-1.5)(honest), atol=1e-6)
    [ours] = _ipm(IPMConfig(eps=0.5), view)
    np.testing.assert_allclose(ours, attacks.InnerProductManipulation(tau=0.5)(honest),
                               atol=1e-6)


@pytest.mark.parametrize(("n", "m"), [(50, 12), (20, 3), (16, 2), (9, 4)])
def test_alie_z_is_the_papers(n, m):
    s = np.floor(n / 2 + 1) - m
    share = (n - m - s) / (n - m)
    expected = norm.ppf(share) if 0 < share < 1 else 0.0
    assert alie_z(n, m) == pytest.approx(expected, abs=1e-9)


def config(tmp_path, attack: dict, backend: str = "local"):
    return tiny(tmp_path, rounds=2, topology={"name": "ring", "n": 8},
                strategy={"name": "dsgd", "local_steps": 2, "lr": 0.1},
                faults={"byzantine": list(BYZANTINE), "attack": attack},
                eval={"every": 0, "per_client": False}, backend=backend)


def flat(payload) -> np.ndarray:
    return torch.cat([t.reshape(-1).double() for t in payload.values()]).numpy()


def reference(name: str, attack: dict, target: np.ndarray, honest: dict[int, np.ndarray],
              weights: dict[int, float]) -> np.ndarray:
    """From the papers (and the authors' codes/attacks.py), in numpy."""
    models = np.vstack([target, *honest.values()])
    if name == "alie":
        return models.mean(0) - attack["z"] * models.std(0, ddof=1)
    if name == "ipm":
        return -attack["eps"] * models.mean(0)
    pull = sum(weights[k] * (x - target) for k, x in honest.items())
    byz = sum(w for k, w in weights.items() if k in BYZANTINE)
    return target - attack["eps"] * pull / byz


@pytest.mark.parametrize("attack", [{"name": "alie", "z": 1.0}, {"name": "ipm", "eps": 0.1},
                                    {"name": "dissensus", "eps": 1.5}], ids=lambda a: a["name"])
def test_each_byzantine_payload_is_made_from_the_honest_ones_of_its_phase(tmp_path, attack):
    cfg = from_dict(config(tmp_path, attack))
    # one gossip phase: a message an edge
    sent = {(m.src, m.dst): m.payload for m in first_round_messages(cfg)}
    weights = check(cfg).topology.round_graph(0).weights
    checked = 0
    for (b, j), payload in sent.items():
        if b not in BYZANTINE:
            continue
        honest = {k: flat(p) for (k, dst), p in sorted(sent.items())
                  if dst == j and k not in BYZANTINE}
        target = flat(sent[(j, b)])  # j is honest: ring neighbours of 1 and 5 are
        expected = reference(attack["name"], attack, target, honest, weights[j])
        np.testing.assert_allclose(flat(payload), expected, rtol=0, atol=1e-6)
        assert not np.allclose(flat(payload), target)  # it is an attack
        checked += 1
    assert checked == 4  # each Byzantine client's two ring neighbours


def test_an_omniscient_attack_on_ray_equals_local(tmp_path, ray_session):
    assert_ray_equals_local(config(tmp_path, {"name": "dissensus"}), 3)


def test_a_users_rule_and_attack_register_as_decents_do(tmp_path):
    """experiments/robust/my_parts.py (the guide's example), named in ``imports``: its rule
    is the run's ``strategy.robust`` with its own field, and each payload of its
    omniscient attack is what the destination's lowest-numbered honest neighbour sent."""
    raw = config(tmp_path, {"name": "mimic"})
    raw["imports"] = [str(ROOT / "experiments/robust/my_parts.py")]
    raw["strategy"]["robust"] = {"name": "norm_filtered_mean", "factor": 1.5}
    cfg = from_dict(raw)
    assert type(cfg.strategy.robust).__name__ == "NormFilteredMeanConfig"
    assert cfg.strategy.robust.factor == 1.5
    sent = {(m.src, m.dst): m.payload for m in first_round_messages(cfg)}
    for (b, j), payload in sent.items():
        if b in BYZANTINE:
            copied = min(k for (k, dst) in sent if dst == j and k not in BYZANTINE)
            np.testing.assert_array_equal(flat(payload), flat(sent[(copied, j)]))


def test_an_omniscient_attack_on_compressed_payloads_is_refused_in_one_line(tmp_path):
    raw = config(tmp_path, {"name": "alie"})
    raw["strategy"] = {"name": "choco", "compression": {"name": "topk", "keep": 0.1}}
    with pytest.raises(ConfigError) as err:
        from_dict(raw)
    assert err.value.field == "faults.attack.name" and "compressed" in str(err.value)
    # a sign flip reads no other payload: it runs on the same config
    raw["faults"]["attack"] = {"name": "sign_flip"}
    from_dict(raw)
