"""The config reference: every field documented, `decent config show|schema`, and each
command's help pointing at a docs page that exists."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from decent.core.field_docs import field_description
from decent.core.registry import component_fields
from decent.core.schema import CHECK, at_least, checked_fields, positive
from decent.engine.config import RunConfig, from_dict, load_config, to_yaml
from decent.tools import config_docs
from decent.tools.cli import DOCS, main

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Documented:
    # above, first line
    # above, second line
    a: int = at_least(0, 1)
    b: float = positive(0.5)  # trailing
    c: int = 3

    d: str = "x"  # trailing after a gap


@dataclass
class Child(Documented):
    e: int = 4  # the child's own


def test_a_description_is_the_comment_above_or_beside_the_field() -> None:
    assert field_description(Documented, "a") == "above, first line above, second line"
    assert field_description(Documented, "b") == "trailing"
    assert field_description(Documented, "c") is None
    assert field_description(Documented, "d") == "trailing after a gap"
    assert field_description(Child, "a") == "above, first line above, second line"
    assert field_description(Child, "e") == "the child's own"


def config_classes() -> list[tuple[str, type]]:
    from decent.models.registry import MODELS
    from decent.strategies.registry import STRATEGIES
    from decent.tasks.registry import TASKS

    out: list[tuple[str, type]] = [("", RunConfig)]
    for kind, registry in (("strategy", STRATEGIES), ("task", TASKS), ("model", MODELS)):
        out += [(f"{kind}.{n}", registry.entry(n).config) for n in registry.names]
    return out


def test_every_config_field_has_a_description() -> None:
    """The config reference page and `decent config schema` print these: a field without a
    comment would be a row without a meaning."""
    missing = []
    for where, cls in config_classes():
        rows = config_docs.field_rows(cls) if cls is RunConfig else config_docs.section_rows(where)
        for row in rows:
            if row.name in ("strategy", "task", "model") and cls is RunConfig:
                continue  # the component sections: documented per component below
            if not row.description:
                missing.append(f"{where}:{row.name}" if where else row.name)
    assert not missing, f"{len(missing)} fields without a description: {sorted(set(missing))}"


@pytest.mark.parametrize("section", ["ray", "strategy.gasloc", "strategy.fedavg", "task.sst2",
                                     "top"])
def test_schema_text_has_each_field_with_its_declared_range_and_default(
        section: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "schema", section]) == 0
    out = capsys.readouterr().out
    kind = section.partition(".")[0]
    cls = {"ray": None, "top": RunConfig}.get(section)
    if cls is None and kind == "ray":
        cls = type(RunConfig().ray)
    if cls is None:
        cls = dict(config_classes())[section]
    prefix = "" if section == "top" else f"{kind}."
    # a part's fields are its variant's: one line names them
    parts = component_fields(cls) if section != "top" else {}
    for part, registry in parts.items():
        line = next((ln for ln in out.splitlines() if ln.startswith(f"{prefix}{part} ")), "")
        assert f"decent config schema {registry.kind}.NAME" in line, part
    for name, _, check in checked_fields(cls):
        if section == "top" and ("." in name or name in ("strategy", "task", "model")):
            continue
        if name.partition(".")[0] in parts:
            continue
        line = next((ln for ln in out.splitlines() if ln.startswith(f"{prefix}{name} ")), None)
        assert line is not None, name
        assert check is None or check.describe() in line
        value: object = cls()  # the default as a fresh config holds it
        for part in name.split("."):
            value = getattr(value, part)
        assert f"default {config_docs.format_default(value)};" in line


def test_config_show_prints_the_config_a_run_would_save(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    args = ["experiments/quickstart.yaml", "strategy.lr=0.2", "topology.name=torus"]
    assert main(["config", "show", str(ROOT / args[0]), *args[1:]]) == 0
    shown = capsys.readouterr().out
    assert shown == to_yaml(load_config(ROOT / args[0], args[1:]))
    again = from_dict(yaml.safe_load(shown))
    assert again.strategy.lr == 0.2 and again.topology.name == "torus"
    assert again.ray.object_store_mb == RunConfig().ray.object_store_mb  # a default, filled in


@pytest.mark.parametrize("argv", [["config", "schema", "no_such_section"],
                                  ["config", "schema", "strategy.no_such_method"],
                                  ["config", "show", "missing.yaml"],
                                  ["config", "show", "experiments/quickstart.yaml", "lr=-1"],
                                  ["config", "list", "x"]])
def test_config_command_bad_input_is_one_line(argv: list[str],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1 and captured.err.startswith("error: ")


def nav_pages() -> set[str]:
    text = (ROOT / "mkdocs.yml").read_text()
    return set(re.findall(r"([\w/-]+\.md)\s*$", text.split("\nnav:\n")[1], re.M))


def test_every_command_help_names_docs_pages_that_exist(capsys: pytest.CaptureFixture[str]) -> None:
    pages = nav_pages()
    for command, where in DOCS.items():
        argv = ["--help"] if command == "decent" else [command, "--help"]
        with pytest.raises(SystemExit):
            main(argv)
        out = capsys.readouterr().out
        assert f"details: {where}" in " ".join(out.split())
        for path in where.split(", "):
            assert (ROOT / path).is_file() and path.removeprefix("docs/") in pages, path


def test_the_reference_page_has_a_row_for_every_field_of_every_component() -> None:
    page = config_docs.reference_markdown()
    for where, cls in config_classes():
        if cls is RunConfig:
            continue
        kind = where.partition(".")[0]
        parts = component_fields(cls)  # one row each; their fields: in their own tables
        for name, _, _ in checked_fields(cls):
            head = name.partition(".")[0]
            assert f"| `{kind}.{head if head in parts else name}` |" in page, f"{where}: {name}"
    declared = [f for f in dataclasses.fields(RunConfig) if CHECK in f.metadata]
    for f in declared:
        assert f"| `{f.name}` |" in page
    # each registered part's variants, with the fields each declares, under its section
    for kind, where in config_docs.WHERE.items():
        registry = config_docs._registries()[kind]
        assert f"`{where}.name` picks one of" in page
        for variant in registry.names:
            for f in dataclasses.fields(registry.entry(variant).config):
                assert f"| `{where}.{f.name}` |" in page, f"{kind}.{variant}: {f.name}"
    assert "### topology: `meshgrid`, `torus`" in page  # variants sharing a class: one table


def test_a_section_shows_the_defaults_its_parent_builds_it_with() -> None:
    """SPES builds its lr_schedule and router_loss sections with its paper's values, not
    the section classes' own defaults."""
    from decent.strategies.spes import SPESConfig

    spes = SPESConfig()
    rows = {r.name: r.default for r in config_docs.section_rows("strategy.spes")}
    assert rows["lr_schedule.name"] == spes.lr_schedule.name == "cosine"
    assert rows["lr_schedule.warmup_steps"] == str(spes.lr_schedule.warmup_steps)
    assert rows["router_loss.balance"] == str(spes.router_loss.balance)
    dsgd = {r.name: r.default for r in config_docs.section_rows("strategy.dsgd")}
    assert dsgd["lr_schedule.name"] == "constant"
