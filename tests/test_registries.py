"""Every pluggable part registered one way: a topology, a compressor, a robust aggregator
and an attack written in a user's own file, named in `imports:`, run like decent's own;
and a field the chosen variant does not declare is one line naming it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from decent.engine.config import from_dict
from decent.run.runner import run
from decent.tools.cli import main
from tests.helpers import tiny

PARTS = '''
from dataclasses import dataclass

import networkx as nx
import torch

from decent.compression import COMPRESSORS, CompressionConfig
from decent.core.schema import at_least, in_range, number
from decent.core.storable import storable
from decent.robust.aggregators import AGGREGATORS, AggregatorConfig
from decent.robust.attacks import ATTACKS, AttackConfig, map_floats
from decent.topologies import TOPOLOGIES, TopologyConfig

CALLS = {"graph": 0, "compress": 0, "aggregate": 0, "attack": 0}


@dataclass(frozen=True)
class StrideConfig(TopologyConfig):
    name: str = "stride_ring"
    stride: int = at_least(1, 1)  # i talks to i ± stride


def stride_ring(cfg):
    CALLS["graph"] += 1
    G = nx.Graph()
    G.add_nodes_from(range(cfg.n))
    G.add_edges_from((i, (i + cfg.stride) % cfg.n) for i in range(cfg.n))
    return G


@dataclass
class HalfConfig(CompressionConfig):
    name: str = "half"
    scale: float = in_range(0.5, 0, 1, lo_open=True)  # values travel multiplied by this


@storable(fields=("scale",))
class Half:
    def __init__(self, scale):
        self.scale = scale

    def compress(self, x):
        CALLS["compress"] += 1
        return {"v": x.detach() * self.scale}

    def decompress(self, payload, like):
        return (payload["v"] / self.scale).to(like.dtype).reshape(like.shape)


@dataclass
class FirstConfig(AggregatorConfig):
    name: str = "first"
    index: int = at_least(0, 0)  # which received vector wins


def first(cfg):
    def rule(stacked):
        CALLS["aggregate"] += 1
        return stacked[min(cfg.index, stacked.shape[0] - 1)].clone()
    return rule


@storable
@dataclass
class ShiftConfig(AttackConfig):
    name: str = "shift"
    by: float = number(3.0)  # added to every float


def shift(attack, payload, out):
    CALLS["attack"] += 1
    return map_floats(payload, lambda t: t + attack.cfg.by)


TOPOLOGIES.register("stride_ring", StrideConfig, stride_ring)
COMPRESSORS.register("half", HalfConfig, lambda cfg: Half(cfg.scale))
AGGREGATORS.register("first", FirstConfig, first)
ATTACKS.register("shift", ShiftConfig, shift)
'''


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user's file, written once: a module name is imported once per process."""
    path = tmp_path_factory.mktemp("user") / "registry_parts_of_a_user.py"
    path.write_text(PARTS)
    return path


def calls() -> dict[str, int]:
    return sys.modules["registry_parts_of_a_user"].CALLS


def test_a_users_topology_and_attack_run_on_dsgd(tmp_path: Path, parts: Path) -> None:
    cfg = from_dict(tiny(tmp_path, imports=[str(parts)], rounds=2,
                         topology={"name": "stride_ring", "n": 6, "stride": 1},
                         faults={"byzantine": [2], "attack": {"name": "shift", "by": 2.0}}))
    assert (cfg.topology.stride, cfg.faults.attack.by) == (1, 2.0)
    before = dict(calls())
    result = run(cfg)
    assert calls()["graph"] > before["graph"]
    assert calls()["attack"] > before["attack"]
    assert result.summary["attack"] == "shift"


def test_a_users_compressor_and_aggregator_run_on_dso(tmp_path: Path, parts: Path) -> None:
    raw = tiny(tmp_path, imports=[str(parts)], rounds=1,
               topology={"name": "two_tier", "n": 6, "aggregators": 2},
               strategy={"name": "dso", "batch_size": 8, "lr": 0.1, "semantic": False,
                         "compression": {"name": "half", "scale": 0.25,
                                         "error_feedback": True},
                         "aggregator": {"name": "first", "index": 1},
                         "fanout": 1, "gossip_rounds": 1},
               eval={"every": 1, "per_client": False})
    cfg = from_dict(raw)
    assert (cfg.strategy.compression.scale, cfg.strategy.aggregator.index) == (0.25, 1)
    before = dict(calls())
    run(cfg)
    assert calls()["compress"] > before["compress"]
    assert calls()["aggregate"] > before["aggregate"]


@pytest.mark.parametrize(("section", "field"), [
    ({"topology": {"name": "ring", "n": 6, "degree": 3}}, "topology.degree"),
    ({"topology": {"name": "stride_ring", "n": 6, "rows": 2}}, "topology.rows"),
    ({"strategy": {"name": "choco", "compression": {"name": "int8", "keep": 0.1}}},
     "strategy.compression.keep"),
    ({"strategy": {"name": "dso", "aggregator": {"name": "median", "trim": 0.2}}},
     "strategy.aggregator.trim"),
    ({"faults": {"byzantine": [1], "attack": {"name": "shift", "std": 1.0}}},
     "faults.attack.std"),
])
def test_a_field_the_chosen_variant_does_not_declare_is_one_line(
        tmp_path: Path, parts: Path, capsys: pytest.CaptureFixture[str],
        section: dict[str, Any], field: str) -> None:
    raw = {**tiny(tmp_path, imports=[str(parts)]), **section}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {field}: ") and "\n" not in err, err


def test_switching_a_part_by_override_drops_the_old_ones_fields(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from decent.engine.config import load_config

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(tiny(
        tmp_path, topology={"name": "random_regular", "n": 6, "degree": 3},
        faults={"byzantine": [1], "attack": {"name": "replay", "lag": 2}})))
    cfg = load_config(path, ["topology.name=exponential", "faults.attack.name=scale"])
    assert type(cfg.topology).__name__ == "TopologyConfig"
    assert cfg.faults.attack.factor == -4.0
    err = capsys.readouterr().err
    assert "dropped topology.degree from" in err
    assert "dropped faults.attack.lag" in err


def test_a_run_directory_saved_with_flat_sections_still_loads(tmp_path):
    """Run directories written before the per-variant sections saved every variant's
    fields in one section (a ring with a degree, an attack with every attack's fields):
    `decent verify` and `decent resume` read them, dropping what the part never declared,
    while the same section written by hand is refused."""
    from decent.core.errors import ConfigError
    from decent.engine.config import load_config
    from decent.engine.saved import load_saved_config

    raw = tiny(tmp_path, topology={"name": "ring", "n": 4, "degree": 3, "p": 0.5,
                                   "seed": 0, "weights": "metropolis"},
               faults={"attack": {"name": "replay", "lag": 1, "factor": -4.0, "std": 1.0}})
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match="topology"):
        load_config(path)
    cfg = load_saved_config(path)
    assert cfg.topology.name == "ring" and cfg.topology.n == 4
    assert cfg.faults.attack.name == "replay" and not hasattr(cfg.faults.attack, "factor")
