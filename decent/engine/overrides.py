"""What a command line's overrides do to the config file before it is merged: ``~key``
deletes a key, switching a component drops the old component's fields, and the sections
of registered parts (``topology``, ``faults.attack``) are merged apart from the schema."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from decent.core.errors import ConfigError
from decent.core.field_types import did_you_mean
from decent.core.registry import COMPONENT, component_fields
from decent.core.schema import section_default


def delete_key(data: dict[str, Any], key: str, path: str | Path) -> None:
    """Remove the dotted ``key`` from the file's mapping ``data``."""
    *parents, last = key.split(".")
    node: Any = data
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    if not isinstance(node, dict) or last not in node:
        near = did_you_mean(last, node, "~" + "".join(f"{p}." for p in parents)) \
            if isinstance(node, dict) else ""
        raise ConfigError("overrides", f"~{key}: {path} has no such key to delete{near}")
    del node[last]


def drop_foreign_fields(data: dict[str, Any], overrides: list[str],
                        path: str | Path) -> list[str]:
    """Where an override switches a registered part (``strategy.name``, ``task.name``,
    ``model.name``, ``topology.name``, ``faults.attack.name``, a strategy's
    ``compression.name``...) away from the file's, drop the file's fields of that section
    the new part does not declare; one line per section naming them (for stderr)."""
    names = dict(item.split("=", 1) for item in overrides if "=" in item)
    switched = sorted((key[: -len(".name")] for key in names if key.endswith(".name")),
                      key=lambda section: section.count("."))  # outer sections first
    notes = []
    for section in switched:
        new = names[f"{section}.name"]
        old = _at(data, section.split("."))
        registry = _registry_at(data, names, section.split("."))
        if registry is None or not isinstance(old, dict) or str(old.get("name")) == new \
                or new not in registry.names:
            continue
        declared = {f.name for f in dataclasses.fields(registry.entry(new).config)}
        dropped = [key for key in old if key not in declared]
        if dropped:
            for key in dropped:
                del old[key]
            listed = ", ".join(f"{section}.{key}" for key in dropped)
            was = old.get("name") or "the default"
            notes.append(f"{section}.name={new}: dropped {listed} from {path} "
                         f"({was}'s, not {new}'s)")
    return notes


def prune_saved(data: dict[str, Any], parts: list[str] | None = None) -> None:
    """A run directory's saved ``config.yaml`` as this version reads it: in every section
    that names a registered part (the topology, the attack, a strategy's compression or
    aggregator), the fields that part does not declare are dropped. Versions before the
    per-variant sections saved every variant's fields in one flat section (a ring's
    ``degree``); decent wrote them, and they meant nothing to the part they sat beside."""
    parts = parts or []
    node = _at(data, parts) if parts else data
    if not isinstance(node, dict):
        return
    if parts and "name" in node:
        registry = _registry_at(data, {}, parts)
        if registry is not None and str(node["name"]) in registry.names:
            declared = {f.name for f in dataclasses.fields(registry.entry(str(node["name"]))
                                                           .config)}
            for key in [k for k in node if k not in declared]:
                del node[key]
    for key, value in list(node.items()):
        if isinstance(value, dict):
            prune_saved(data, [*parts, key])


def _at(data: Any, parts: list[str]) -> Any:
    for part in parts:
        data = data.get(part) if isinstance(data, dict) else None
    return data


def _registry_at(data: dict[str, Any], names: dict[str, str], parts: list[str]) -> Any:
    """The registry whose part the section at ``parts`` names: a top-level one, the
    faults' attack, or a part declared inside a component (a strategy's compression),
    found through the component the file or an override names."""
    from decent.models.registry import MODELS
    from decent.robust.attacks import ATTACKS
    from decent.strategies.registry import STRATEGIES
    from decent.tasks.registry import TASKS
    from decent.topologies import TOPOLOGIES

    if parts == ["faults", "attack"]:
        return ATTACKS
    registry: Any = {"strategy": STRATEGIES, "task": TASKS, "model": MODELS,
                     "topology": TOPOLOGIES}.get(parts[0])
    for depth in range(1, len(parts)):
        owner = ".".join(parts[:depth])
        section = _at(data, parts[:depth])
        name = names.get(f"{owner}.name") or (section.get("name")
                                               if isinstance(section, dict) else section)
        if registry is None or name is None or str(name) not in registry.names:
            return None
        fields = component_fields(registry.entry(str(name)).config)
        registry = fields.get(parts[depth])
    return registry


def component_paths(cls: type, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The dotted paths of ``cls``'s fields that hold a registered part, e.g.
    ``("faults", "attack")`` (those of sections the schema declares, not of components)."""
    out = []
    for f in dataclasses.fields(cls):
        if COMPONENT in f.metadata:
            out.append((*path, f.name))
        elif (section := section_default(f)) is not None:
            out += component_paths(type(section), (*path, f.name))
    return out


def take_components(layers: list[Any], cls: type) -> dict[tuple[str, ...], Any]:
    """Remove each registered part's section of schema ``cls`` (``topology``,
    ``faults.attack``) from the raw ``layers`` and return it merged over the layers in
    order (a later layer's keys win; a bare name is ``{name: ...}``)."""
    given: dict[tuple[str, ...], Any] = {}
    for raw in layers:
        for path in component_paths(cls):
            *parents, key = path
            node = raw
            for part in parents:
                node = node.get(part) if isinstance(node, dict) else None
            if not isinstance(node, dict) or node.get(key) is None:
                continue
            value = node.pop(key)
            value = {"name": value} if isinstance(value, str) else value
            given[path] = {**given.get(path, {}), **value} if isinstance(value, dict) else value
    return given
