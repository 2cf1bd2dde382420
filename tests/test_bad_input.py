"""Classes of bad input, enumerated from the schema: every declared range of every config
field, wrong types, whole sections of the wrong shape, unreadable files, bad command-line
arguments. Each must give one line naming the field, exit code 2, no traceback and
nothing on disk."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
import yaml

from decent.core.schema import checked_fields
from decent.engine.config import RunConfig
from decent.models.registry import MODELS
from decent.strategies.registry import STRATEGIES
from decent.tasks.registry import TASKS
from decent.tools.cli import main
from tests.helpers import tiny

# A config section per component: strategies, tasks and models are validated against
# the dataclass their name selects, so each class is tried under one of its names.
COMPONENTS = [("strategy", STRATEGIES), ("task", TASKS), ("model", MODELS)]


def component_classes():
    for section, registry in COMPONENTS:
        seen = set()
        for name in registry.names:
            cls = registry.entry(name).config
            if cls not in seen:
                seen.add(cls)
                yield section, name, cls


def range_cases():
    """(section, component name, dotted field, bad value) for every declared range."""
    for section, name, cls in component_classes():
        for field, _, check in checked_fields(cls):
            if check is None:
                continue
            for bad in check.bad_values():
                yield section, name, f"{section}.{field}", [bad] if check.each else bad
    for field, _, check in checked_fields(RunConfig):
        if check is not None:
            for bad in check.bad_values():
                yield None, None, field, [bad] if check.each else bad


def once_each(cases):
    """``cases`` (section, component, field, ...) with each distinct field-and-value case
    once: a field a component inherits (every strategy's ``lr``, ``momentum``) has one
    declared check, which every class that inherits it runs. Every component class keeps
    at least one case, so a class whose config skipped its checks would still be seen."""
    seen, classes = set(), set()
    for case in cases:
        key = (case[2], json.dumps(case[3:], sort_keys=True, default=str))
        if key in seen and case[:2] in classes:
            continue
        seen.add(key)
        classes.add(case[:2])
        yield case


RANGE_CASES = list(once_each(range_cases()))


def run_cli(tmp_path: Path, capsys, cfg: dict, *overrides: str) -> str:
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    code = main(["run", str(path), *overrides])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    assert not (tmp_path / "runs").exists()
    return err


def config_with(tmp_path: Path, section: str | None, name: str | None) -> dict:
    cfg = tiny(tmp_path)
    if section is not None:
        cfg[section] = {"name": name}  # that component's defaults
    return cfg


def test_every_field_range_is_declared_and_enumerated():
    """Numbers and names have a declared range; only flags may go without (and a
    component's ``name``, which its registry checks)."""
    missing = []
    for section, name, cls in component_classes():
        for field, f, check in checked_fields(cls):
            # a component's name, and a registered part's inside it (strategy.compression),
            # are checked by their registries
            if check is None and f.type not in ("bool", bool) and \
                    field.rpartition(".")[2] != "name":
                missing.append(f"{section}:{name}.{field}")
    for field, f, check in checked_fields(RunConfig):
        if check is None and f.type not in ("bool", bool) and field not in (
                "strategy", "task", "model", "topology.edges"):
            missing.append(field)
    assert not missing
    assert len(RANGE_CASES) > 100


@pytest.mark.parametrize(("section", "name", "field", "bad"), RANGE_CASES,
                         ids=[f"{c[2]}={c[3]}" for c in RANGE_CASES])
def test_out_of_range_value_is_one_line_naming_the_field(tmp_path, capsys, section, name,
                                                         field, bad):
    cfg = config_with(tmp_path, section, name)
    value = yaml.safe_dump(bad, default_flow_style=True).strip().removesuffix("...").strip()
    err = run_cli(tmp_path, capsys, cfg, f"{field}={value}")
    assert err.startswith(f"error: {field}")
    assert "must" in err or "choose" in err or "not allowed" in err


def numeric_fields():
    for section, name, cls in component_classes():
        for field, _, check in checked_fields(cls):
            if check is not None and check.choices is None and check.lo is not None:
                yield section, name, f"{section}.{field}"


@pytest.mark.parametrize(("section", "name", "field"), list(once_each(numeric_fields())))
def test_wrong_type_is_one_line_naming_the_field(tmp_path, capsys, section, name, field):
    err = run_cli(tmp_path, capsys, config_with(tmp_path, section, name), f"{field}=abc")
    assert err.startswith(f"error: {field}")


SECTIONS = ["topology", "strategy", "task", "model", "network", "compute", "faults", "eval",
            "ray", "tracking"]


@pytest.mark.parametrize("shape", [[1, 2], 5])
@pytest.mark.parametrize("section", SECTIONS)
def test_a_section_of_the_wrong_shape(tmp_path, capsys, section, shape):
    cfg = tiny(tmp_path)
    cfg[section] = shape
    err = run_cli(tmp_path, capsys, cfg)
    assert err.startswith(f"error: {section}")


def test_nested_section_as_a_list(tmp_path, capsys):
    cfg = tiny(tmp_path)
    cfg["tracking"]["wandb"] = ["offline"]
    assert run_cli(tmp_path, capsys, cfg).startswith("error: tracking.wandb")


@pytest.mark.parametrize(("strategy", "old", "new"), [("gasloc", "inner_momentum", "momentum"),
                                                      ("choco", "consensus_step", "gossip_step")])
def test_a_renamed_key_names_the_new_one(tmp_path, capsys, strategy, old, new):
    err = run_cli(tmp_path, capsys, tiny(tmp_path, strategy={"name": strategy, old: 0.5}))
    assert err.startswith(f"error: strategy.{old}")
    assert f"strategy.{new}" in err


def test_gasloc_outer_momentum_given_as_momentum_with_adamw(tmp_path, capsys):
    """GASLoC's γ used to be `momentum`; with AdamW (which has no momentum) that old key is
    caught and the new name given."""
    err = run_cli(tmp_path, capsys, tiny(tmp_path, strategy={"name": "gasloc", "momentum": 0.5}))
    assert err.startswith("error: strategy.momentum") and "outer_momentum" in err


@pytest.mark.parametrize("name", ["a/b", "../up", ".hidden", "a b", ""])
def test_run_name_that_is_not_a_directory_name(tmp_path, capsys, name):
    err = run_cli(tmp_path, capsys, tiny(tmp_path, name=name))
    assert err.startswith("error: name")
    assert not list(tmp_path.rglob("*.partial"))


def test_out_dir_that_is_a_file(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    cfg = tiny(tmp_path)
    cfg["tracking"]["out_dir"] = str(blocker / "runs")
    err = run_cli(tmp_path, capsys, cfg)
    assert err.startswith("error: tracking.out_dir")
    assert blocker.read_text() == "x"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_on_a_machine_without_it(tmp_path, capsys):
    assert run_cli(tmp_path, capsys, tiny(tmp_path, device="cuda")).startswith("error: device")


def test_cuda_on_ray_without_gpus_for_the_actors(tmp_path, capsys):
    err = run_cli(tmp_path, capsys, tiny(tmp_path, device="cuda", backend="ray"))
    assert err.startswith("error: device") and "num_gpus_per_actor" in err


@pytest.mark.parametrize(("body", "words"), [
    (b"", "empty"),
    (b"# only a comment\n", "empty"),
    (b"\xff\xfe rounds: 3\n", "UTF-8"),
    (b"rounds: [1, 2\n", "not valid YAML"),
    (b"rounds: 3\n\tseed: 1\n", "not valid YAML"),
    (b"a: b: c\n", "not valid YAML"),
    (b"- 1\n- 2\n", "mapping"),
    (b"just text\n", "mapping"),
    (b"1: 2\n", "not a name"),
])
def test_unreadable_config_files(tmp_path, capsys, body, words):
    path = tmp_path / "cfg.yaml"
    path.write_bytes(body)
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: config")
    assert words in err
    assert not (Path.cwd() / "runs" / "run").exists()


def test_config_path_that_is_a_directory(tmp_path, capsys):
    assert main(["run", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("error: config")


@pytest.mark.parametrize(("argv", "field"), [
    (["topo", "ring", "--n", "-1"], "topology.n"),
    (["topo", "ring", "--n", "0"], "topology.n"),
    (["topo", "ring", "--round", "-1"], "round"),
    (["topo", "ring", "--seed", "-1"], "topology.seed"),
    (["topo", "erdos_renyi", "--p", "2"], "topology.p"),
    (["topo", "erdos_renyi", "--p", "-0.5"], "topology.p"),
    (["topo", "random_regular", "--degree", "-1"], "topology.degree"),
    (["topo", "meshgrid", "--rows", "0"], "topology.rows"),
    (["topo", "ring", "--weights", "magic"], "topology.weights"),
    (["topo", "hexagon"], "topology.name"),
    (["topo", "ring", "--n", "abc"], "arguments"),
    (["run"], "arguments"),
    (["fly"], "arguments"),
    ([], "arguments"),
])
def test_bad_command_line_arguments(capsys, argv, field):
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"error: {field}")


def test_every_config_class_is_a_dataclass_with_defaults():
    """Every field can be left out of a YAML file: the schema gives it a default."""
    for _, _, cls in component_classes():
        obj = cls()
        assert dataclasses.is_dataclass(obj)


def bool_cases():
    """(section, component name, dotted field) of every bool field."""
    for section, name, cls in component_classes():
        for field, f, _ in checked_fields(cls):
            if f.type in ("bool", bool):
                yield section, name, f"{section}.{field}"
    for field, f, _ in checked_fields(RunConfig):
        if f.type in ("bool", bool):
            yield None, None, field


@pytest.mark.parametrize(("section", "component", "field"), list(once_each(bool_cases())),
                         ids=lambda x: str(x))
def test_every_bool_field_takes_only_true_or_false(tmp_path, capsys, section, component,
                                                   field):
    cfg = tiny(tmp_path)
    if section is not None:
        cfg[section] = {"name": component}
    for bad in ("2", "maybe"):
        err = run_cli(tmp_path, capsys, cfg, f"{field}={bad}")
        assert err.startswith(f"error: {field}:"), err
    assert not (tmp_path / "runs").exists()
