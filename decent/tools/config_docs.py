"""Every config field with its default, allowed values and meaning: one source for
``decent config schema SECTION`` and the docs' config reference page.

The allowed values come from each field's declared check (:mod:`decent.core.schema`), the
meaning from the comment beside its declaration (:mod:`decent.core.field_docs`), so
neither output can drift from what ``decent run`` accepts.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from decent.core.errors import ConfigError
from decent.core.field_docs import field_description
from decent.core.field_types import did_you_mean
from decent.core.registry import COMPONENT
from decent.core.schema import CHECK, Check, section_default

COMPONENTS = ("strategy", "task", "model")
# where the section of each kind of registered part sits in a run config
WHERE = {"topology": "topology", "compression": "strategy.compression",
         "aggregator": "strategy.robust", "attack": "faults.attack"}


@dataclass(frozen=True)
class FieldRow:
    name: str  # dotted, from the section's root (``lr_schedule.warmup_steps``)
    type: str
    default: str
    allowed: str
    description: str | None


def format_default(value: Any) -> str:
    """A default as YAML writes it: ``null``, ``true``, ``[0.9, 0.999]``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def field_rows(cls: type, prefix: str = "", owner: Any = None) -> Iterator[FieldRow]:
    """The fields of config dataclass ``cls`` in declaration order, nested sections
    flattened to dotted names (the section's own row first). The defaults are those of
    ``owner`` (default: ``cls()``), so a nested section shows the values its parent builds
    it with (SPES's cosine schedule, not the schedule class's constant one)."""
    owner = cls() if owner is None else owner
    for f in dataclasses.fields(cls):
        value = getattr(owner, f.name)
        name = f"{prefix}{f.name}"
        description = field_description(cls, f.name)
        if COMPONENT in f.metadata:  # a registered part: its fields depend on its name
            kind = f.metadata[COMPONENT].kind
            # `decent config schema KIND.NAME` labels them under WHERE[kind]; a part the
            # config holds under another key (DSO's aggregator) says where they go here
            under = "" if WHERE.get(kind, "").endswith(f".{name}") or WHERE.get(kind) == name \
                else f"; in this section under {name}"
            yield FieldRow(name, "component", format_default(value.name),
                           f"one of: {', '.join(f.metadata[COMPONENT].names)} (fields: "
                           f"decent config schema {kind}.NAME{under})", description)
            continue
        if dataclasses.is_dataclass(value):
            yield FieldRow(name, "section", "", "", description)
            yield from field_rows(type(value), f"{name}.", value)
            continue
        check: Check | None = f.metadata.get(CHECK)
        allowed = "any value" if check is None else check.describe()
        yield FieldRow(name, str(f.type), format_default(value), allowed, description)


def _run_config() -> type:
    from decent.engine.config import RunConfig

    return RunConfig


def _registries() -> dict[str, Any]:
    from decent.compression import COMPRESSORS
    from decent.models.registry import MODELS
    from decent.robust.aggregators import AGGREGATORS
    from decent.robust.attacks import ATTACKS
    from decent.strategies.registry import STRATEGIES
    from decent.tasks.registry import TASKS
    from decent.topologies import TOPOLOGIES

    return {"strategy": STRATEGIES, "task": TASKS, "model": MODELS, "topology": TOPOLOGIES,
            "compression": COMPRESSORS, "aggregator": AGGREGATORS, "attack": ATTACKS}


def sections() -> list[str]:
    """The names ``decent config schema`` takes."""
    run = _run_config()
    names = ["top"] + [f.name for f in dataclasses.fields(run)
                       if section_default(f) is not None and COMPONENT not in f.metadata]
    for kind, registry in _registries().items():
        names += [kind] + [f"{kind}.{n}" for n in registry.names]
    return names


def section_rows(section: str) -> list[FieldRow]:
    """The rows of one section: ``top`` (the run's own fields), a section of the run
    (``ray``, ``faults``), or a component (``strategy.dsgd``, ``task.sst2``)."""
    run = _run_config()
    if section == "top":
        return [r for r in field_rows(run) if "." not in r.name
                and r.type not in ("section", "component") and r.name not in COMPONENTS]
    kind, _, name = section.partition(".")
    registries = _registries()
    if kind in registries and name in registries[kind].names:
        rows = list(field_rows(registries[kind].entry(name).config))
        # a component's `name` is the word that selects it: said once here, not per class
        return [dataclasses.replace(r, description=f"selects this {kind}: {', '.join(names)}")
                if r.name == "name" and not r.description else r for r in rows
                for names in [_sharing(registries[kind], name)]]
    for f in dataclasses.fields(run):
        nested = section_default(f)
        if f.name == section and nested is not None and COMPONENT not in f.metadata:
            return list(field_rows(type(nested), owner=nested))
    raise ConfigError("section", f"unknown section {section!r}; choose one of: "
                      f"{', '.join(sections())}{did_you_mean(section, sections())}")


def _sharing(registry: Any, name: str) -> list[str]:
    """The names registered with the same config class as ``name`` (the prompted tasks
    share one)."""
    cls = registry.entry(name).config
    return [n for n in registry.names if registry.entry(n).config is cls]


def schema_text(section: str, width: int = 88) -> str:
    """``decent config schema SECTION``: each field, its default and allowed values, then
    its meaning indented below; a component kind alone lists its names."""
    registries = _registries()
    if section in registries:
        names = registries[section].names
        return (f"{section}: one of {', '.join(names)}\n"
                f"fields of one: decent config schema {section}.NAME (e.g. {section}."
                f"{names[0]})")
    rows = section_rows(section)
    kind = section.partition(".")[0]
    prefix = "" if section == "top" else WHERE.get(kind, kind) + "."
    name_width = max(len(prefix + r.name) for r in rows)
    lines = []
    for r in rows:
        if r.type == "section":
            head = f"{prefix + r.name:<{name_width}}  (section)"
        else:
            head = f"{prefix + r.name:<{name_width}}  default {r.default}; {r.allowed}"
        lines.append(head)
        if r.description:
            lines += textwrap.wrap(r.description, width, initial_indent="    ",
                                   subsequent_indent="    ")
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: list[FieldRow], prefix: str) -> str:
    out = ["| field | default | allowed | meaning |", "|---|---|---|---|"]
    for r in rows:
        default = "" if r.type == "section" else f"`{_cell(r.default)}`"
        allowed = "(section)" if r.type == "section" else _cell(r.allowed)
        out.append(f"| `{prefix}{r.name}` | {default} | {allowed} | "
                   f"{_cell(r.description or '')} |")
    return "\n".join(out)


def component_markdown(kind: str, name: str) -> str:
    """The field table of one component (a method page's config fields)."""
    return markdown_table(section_rows(f"{kind}.{name}"), f"{WHERE.get(kind, kind)}.")


def reference_markdown() -> str:
    """Every section and field, as the docs' config reference page shows them."""
    run = _run_config()
    parts = ["## Top level", "", markdown_table(section_rows("top"), "")]
    for f in dataclasses.fields(run):
        if section_default(f) is None or COMPONENT in f.metadata:
            continue
        parts += ["", f"## `{f.name}`", ""]
        description = field_description(run, f.name)
        if description:
            parts += [description, ""]
        parts.append(markdown_table(section_rows(f.name), f"{f.name}."))
    for kind, registry in _registries().items():
        where = WHERE.get(kind, kind)
        parts += ["", f"## `{where}`", "",
                  f"`{where}.name` picks one of: {', '.join(f'`{n}`' for n in registry.names)}."
                  " The other fields depend on it: a field the chosen one does not declare "
                  "is refused."]
        by_class: dict[type, list[str]] = {}
        for n in registry.names:
            by_class.setdefault(registry.entry(n).config, []).append(n)
        for names in by_class.values():
            title = ", ".join(f"`{n}`" for n in names)
            parts += ["", f"### {kind}: {title}", "", component_markdown(kind, names[0])]
    return "\n".join(parts) + "\n"
