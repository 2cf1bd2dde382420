"""Classes of bad input, enumerated from the schema: every declared range of every config
field, wrong types, whole sections of the wrong shape, unreadable files, bad command-line
arguments. Each must give one line naming the field, exit code 2, no traceback and
nothing on disk."""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from pathlib import Path

import pytest
import torch
import yaml

from decent.core.errors import ConfigError
from decent.core.field_types import optional
from decent.core.schema import checked_fields, field_info
from decent.engine.config import EvalConfig, RunConfig, WandbConfig, load_config
from decent.models.registry import MODELS
from decent.strategies.registry import STRATEGIES
from decent.tasks.registry import TASKS
from decent.tools.cli import main
from decent.topologies import TOPOLOGIES
from decent.topologies.config import SMALLEST
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
    """Bounded fields not typed int or float (``Any``: a number or a word such as auto),
    which their declared check refuses; the typed ones have their own test below."""
    for section, name, cls in component_classes():
        for field, _, check in checked_fields(cls):
            typed = optional(field_info(cls, field)[0])[0] in (int, float)
            if check is not None and check.choices is None and check.lo is not None \
                    and not typed:
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
    for bad, got in (("2", "2"), ("maybe", "'maybe'")):
        err = run_cli(tmp_path, capsys, cfg, f"{field}={bad}")
        assert re.fullmatch(rf"error: {re.escape(field)}: expected true or false, e\.g\. "
                            rf"{re.escape(field)}=(true|false) \(got {got}\)", err), err
    assert not (tmp_path / "runs").exists()


# ---------------------------------------------------------------- plain-language messages
# A wrong type says what the field expects, in words, with an example built from its type
# and default; an unknown key names the nearest allowed one; a graph too small to be itself
# is refused with the graph to use instead. Exact lines first, then every field and section.


def allowed(cls: type) -> str:
    return ", ".join(f.name for f in dataclasses.fields(cls))


DSGD = STRATEGIES.entry("dsgd").config
DIGITS = TASKS.entry("digits").config

EXACT = [
    # a list field given a scalar
    (["model.hidden=64"], "model.hidden: expected a list of ints, e.g. model.hidden=[64] "
                          "(got 64)"),
    (["strategy.betas=0.9"], "strategy.betas: expected a list of numbers, e.g. "
                             "strategy.betas=[0.9,0.999] (got 0.9)"),
    # an element of a list: the example is the whole list, which an override can set
    (["model.hidden=[a]"], "model.hidden[0]: expected a whole number, e.g. "
                           "model.hidden=[64] (got 'a')"),
    # a float field given a word
    (["strategy.lr=fast"], "strategy.lr: expected a number, e.g. strategy.lr=0.05 "
                           "(got 'fast')"),
    # an int field given a float-like string, and a float
    (["rounds='2.5'"], "rounds: expected a whole number, e.g. rounds=10 (got '2.5')"),
    (["strategy.local_steps=1.5"], "strategy.local_steps: expected a whole number, e.g. "
                                   "strategy.local_steps=5 (got 1.5)"),
    # a bool field given a word
    (["tracking.progress=maybe"], "tracking.progress: expected true or false, e.g. "
                                  "tracking.progress=true (got 'maybe')"),
    # text given a list; an optional field says so
    (["name=[a,b]"], "name: expected text, e.g. name=run (got [a,b])"),
    (["eval.target.metric=[1]"], "eval.target.metric: expected text or null (got [1])"),
    # unknown keys: top level, a section, a nested section, a component's own field
    (["round=50"], f"round: unknown key; allowed keys here: {allowed(RunConfig)}; "
                   "did you mean rounds?"),
    (["eval.evry=2"], f"eval.evry: unknown key; allowed keys here: {allowed(EvalConfig)}; "
                      "did you mean eval.every?"),
    (["tracking.wandb.mod=online"], f"tracking.wandb.mod: unknown key; allowed keys here: "
                                    f"{allowed(WandbConfig)}; did you mean "
                                    "tracking.wandb.mode?"),
    (["strategy.lrr=0.1"], f"strategy.lrr: unknown key; allowed keys here: {allowed(DSGD)}; "
                           "did you mean strategy.lr?"),
    (["task.partiton=iid"], f"task.partiton: unknown key; allowed keys here: "
                            f"{allowed(DIGITS)}; did you mean task.partition?"),
    # no key is close: no suggestion
    (["zzz=1"], f"zzz: unknown key; allowed keys here: {allowed(RunConfig)}"),
    (["strategy.qqq=1"], f"strategy.qqq: unknown key; allowed keys here: {allowed(DSGD)}"),
    # a field of another variant of the component names that variant
    (["topology.degree=3"], "topology.degree: unknown key; allowed keys here: name, n, "
                            "weights; degree is a field of topology random_regular (set "
                            "topology.name=random_regular)"),
    # a misspelt choice, component name and deletion
    (["strategy.optimizer=adamm"], "strategy.optimizer: 'adamm' is not allowed; choose one "
                                   "of: sgd, adamw; did you mean adamw?"),
    (["~evl"], "overrides: ~evl: {path} has no such key to delete; did you mean ~eval?"),
    # degenerate graphs
    (["topology.n=2"], "topology.n: a ring needs at least 3 clients (got 2); for two "
                       "clients use topology.name=complete"),
    (["topology.name=exponential", "topology.n=2"],
     "topology.n: an exponential graph needs at least 3 clients (got 2); for two clients "
     "use topology.name=complete"),
    (["topology.name=star", "topology.n=1"],
     "topology.n: a star (a hub and at least one leaf) needs at least 2 clients (got 1); "
     "for one client use topology.name=complete"),
    (["topology.name=torus", "topology.n=8"],
     "topology.n: torus needs n = rows·cols with rows, cols ≥ 3; 8 has no such "
     "factorisation — use e.g. 9 (topology.rows then picks the grid's shape)"),
    (["topology.name=torus", "topology.n=12", "topology.rows=2"],
     "topology.rows: torus needs rows ≥ 3 (got 2); choose one of: 3, 4"),
    (["topology.name=meshgrid", "topology.n=12", "topology.rows=12"],
     "topology.rows: rows=12 leaves cols = n/rows = 1, but meshgrid needs cols ≥ 2; "
     "choose one of: 2, 3, 4, 6"),
]


@pytest.mark.parametrize(("overrides", "line"), EXACT, ids=[" ".join(c[0]) for c in EXACT])
def test_the_exact_line_of_each_kind_of_mistake(tmp_path, capsys, overrides, line):
    err = run_cli(tmp_path, capsys, tiny(tmp_path), *overrides)
    assert err == "error: " + line.format(path=tmp_path / "cfg.yaml")


@pytest.mark.parametrize(("body", "line"), [
    ({"round": 50}, f"round: unknown key; allowed keys here: {allowed(RunConfig)}; "
                    "did you mean rounds?"),
    ({"strategy": {"name": "dsgd", "lrr": 0.1}},
     f"strategy.lrr: unknown key; allowed keys here: {allowed(DSGD)}; did you mean "
     "strategy.lr?"),
    ({"rounds": "2.5"}, "rounds: expected a whole number, e.g. rounds=10 (got '2.5')"),
    ({"model": {"name": "mlp", "hidden": 64}},
     "model.hidden: expected a list of ints, e.g. model.hidden=[64] (got 64)"),
    ({"topology": {"name": "ring", "n": 2}},
     "topology.n: a ring needs at least 3 clients (got 2); for two clients use "
     "topology.name=complete"),
    # a dotted key written in a file, where keys nest
    ({"strategy.lr": 0.1}, f"strategy.lr: unknown key; allowed keys here: "
                           f"{allowed(RunConfig)}; in a file, nest it: strategy: {{lr: ...}}"),
    # inside an element of a list of sections
    ({"churn": {"events": [{"round": 1, "client": 0, "kind": "leave"}, {"rond": 2}]}},
     "churn.events: an element has the unknown key 'rond'; allowed keys there: round, "
     "client, kind; did you mean round?"),
])
def test_a_config_file_gets_the_same_lines(tmp_path, capsys, body, line):
    assert run_cli(tmp_path, capsys, {**tiny(tmp_path), **body}) == f"error: {line}"


def typed_fields(kinds: tuple[type, ...]):
    """(section, component, dotted field, its type without None) of every field, of every
    section and every component class, whose type is one of ``kinds`` (or a list)."""
    def pick(cls, prefix):
        for field, _, _ in checked_fields(cls):
            tp = optional(field_info(cls, field)[0])[0]
            if tp in kinds or (list in kinds and typing.get_origin(tp) is list):
                yield f"{prefix}{field}", tp
    for section, name, cls in component_classes():
        for field, tp in pick(cls, f"{section}."):
            yield section, name, field, tp.__name__
    for field, tp in pick(RunConfig, ""):
        yield None, None, field, tp.__name__


WORDS = {"int": "a whole number", "float": "a number"}


@pytest.mark.parametrize(("section", "name", "field", "kind"),
                         list(once_each(typed_fields((int, float)))),
                         ids=lambda x: str(x))
def test_every_number_field_given_a_word_says_what_it_expects(tmp_path, capsys, section,
                                                              name, field, kind):
    """The line names the type in words and shows an example, and the example is a value
    the field takes."""
    cfg = config_with(tmp_path, section, name)
    err = run_cli(tmp_path, capsys, cfg, f"{field}=abc")
    found = re.fullmatch(rf"error: {re.escape(field)}: expected {WORDS[kind]}( or null)?, "
                         rf"e\.g\. {re.escape(field)}=(\S+) \(got 'abc'\)", err)
    assert found, err
    path = tmp_path / "cfg.yaml"
    try:
        load_config(path, [f"{field}={found.group(2)}"])
    except ConfigError as exc:  # another field's check may object, this one's must not
        assert exc.field != field, exc


@pytest.mark.parametrize(("section", "name", "field", "kind"),
                         list(once_each(typed_fields((list,)))), ids=lambda x: str(x))
def test_every_list_field_given_a_number_asks_for_a_list(tmp_path, capsys, section, name,
                                                         field, kind):
    err = run_cli(tmp_path, capsys, config_with(tmp_path, section, name), f"{field}=5")
    assert err.startswith(f"error: {field}: expected a list"), err
    assert err.endswith("(got 5)"), err


def one_field_per_section():
    """(section, component, dotted field) of one field of the top level, of every nested
    section and of every component class (and of the sections inside it)."""
    def firsts(cls, prefix):
        seen = set()
        for field, _, _ in checked_fields(cls):
            parent = field.rpartition(".")[0]
            if parent not in seen:
                seen.add(parent)
                yield f"{prefix}{field}"
    for section, name, cls in component_classes():
        for field in firsts(cls, f"{section}."):
            yield section, name, field
    for field in firsts(RunConfig, ""):
        yield None, None, field


@pytest.mark.parametrize(("section", "name", "field"), list(one_field_per_section()),
                         ids=lambda x: str(x))
def test_a_misspelt_key_anywhere_is_told_the_nearest(tmp_path, capsys, section, name, field):
    typo = field + field[-1]  # one letter doubled: lr → lrr, rounds → roundss
    err = run_cli(tmp_path, capsys, config_with(tmp_path, section, name), f"{typo}=1")
    assert err.startswith(f"error: {typo}: unknown key; allowed keys here: "), err
    assert err.endswith(f"; did you mean {field}?"), err


@pytest.mark.parametrize("name", TOPOLOGIES.names)
def test_every_graph_refuses_fewer_clients_than_it_needs(name):
    least = SMALLEST.get(name, (2,))[0]
    if least > 1:
        with pytest.raises(ConfigError) as exc:
            TOPOLOGIES.config({"name": name, "n": least - 1})
        assert exc.value.field == "topology.n"
        assert f"needs at least {least} clients" in exc.value.message
        assert "topology.name=complete" in exc.value.message
    if name in SMALLEST:  # the listed graphs are built from their smallest size on
        assert TOPOLOGIES.config({"name": name, "n": least}).n == least


@pytest.mark.parametrize(("section", "nearest"), [("netwrk", "network"),
                                                 ("strategy.dsgdd", "strategy.dsgd")])
def test_a_misspelt_section_of_config_schema_is_told_the_nearest(capsys, section, nearest):
    assert main(["config", "schema", section]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: section: unknown "), err
    assert f"; did you mean {nearest}?" in err, err
