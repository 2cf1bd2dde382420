"""What a command line's overrides do to the config file before it is merged: ``~key``
deletes a key, and switching a component drops the old component's fields."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from decent.core.errors import ConfigError


def delete_key(data: dict[str, Any], key: str, path: str | Path) -> None:
    """Remove the dotted ``key`` from the file's mapping ``data``."""
    *parents, last = key.split(".")
    node: Any = data
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    if not isinstance(node, dict) or last not in node:
        raise ConfigError("overrides", f"~{key}: {path} has no such key to delete")
    del node[last]


def drop_foreign_fields(data: dict[str, Any], overrides: list[str],
                        path: str | Path) -> list[str]:
    """Where an override switches a component (``strategy.name``, ``task.name``,
    ``model.name``) away from the file's, drop the file's fields of that section the new
    component does not declare; one line per section naming them (for stderr)."""
    from decent.models.registry import MODELS
    from decent.strategies.registry import STRATEGIES
    from decent.tasks.registry import TASKS

    names = dict(item.split("=", 1) for item in overrides)
    notes = []
    for section, registry in (("strategy", STRATEGIES), ("task", TASKS), ("model", MODELS)):
        new = names.get(f"{section}.name")
        old = data.get(section)
        if new is None or not isinstance(old, dict) or str(old.get("name")) == new \
                or new not in registry.names:
            continue
        declared = {f.name for f in dataclasses.fields(registry.entry(new).config)}
        dropped = [key for key in old if key not in declared]
        if dropped:
            for key in dropped:
                del old[key]
            listed = ", ".join(f"{section}.{key}" for key in dropped)
            notes.append(f"{section}.name={new}: dropped {listed} from {path} "
                         f"({old.get('name')}'s, not {new}'s)")
    return notes
