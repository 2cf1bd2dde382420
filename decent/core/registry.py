"""Named, configurable components (strategies, tasks, models).

Each entry pairs a config dataclass with a builder. A config section like
``strategy: {name: dsgd, lr: 0.1}`` is validated against the entry's dataclass through
OmegaConf, so a typo or a wrong type is refused with the field's full name, and then
every field against its declared range (:mod:`decent.core.schema`), before anything runs.
A config class may list keys it no longer has in ``RENAMED`` (old → new): a config that
still uses one is told the new name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from decent.core.errors import ConfigError
from decent.core.schema import check_bools, validate_fields
from decent.core.storable import storable


@dataclass(frozen=True)
class Entry:
    config: type
    build: Callable[..., Any]


class Registry:
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry] = {}

    def register(self, name: str, config: type, build: Callable[..., Any]) -> None:
        self._entries[name] = Entry(config, build)
        # a strategy's per-client State goes into checkpoints: registering the strategy
        # allows it there (a method from a user's own module resumes like decent's own)
        state = getattr(build, "State", None)
        if isinstance(state, type) and dataclasses.is_dataclass(state):
            storable(state)

    @property
    def names(self) -> list[str]:
        return sorted(self._entries)

    def entry(self, name: str) -> Entry:
        if name not in self._entries:
            raise ConfigError(
                f"{self.kind}.name",
                f"unknown {self.kind} '{name}'; choose one of: {', '.join(self.names)}",
            )
        return self._entries[name]

    def config(self, section: DictConfig | dict[str, Any]) -> Any:
        """Validate a config section and return an instance of the entry's dataclass."""
        raw = OmegaConf.create(section) if isinstance(section, dict) else section
        name = raw.get("name")
        if name is None:
            raise ConfigError(
                f"{self.kind}.name", f"missing; choose one of: {', '.join(self.names)}"
            )
        cls = self.entry(str(name)).config
        for old, new in getattr(cls, "RENAMED", {}).items():
            if old in raw:
                raise ConfigError(f"{self.kind}.{old}", f"renamed: write {self.kind}.{new} "
                                  f"(same meaning) for {self.kind} {name}")
        check_bools(OmegaConf.to_container(raw), cls, f"{self.kind}.")
        schema = OmegaConf.structured(cls)
        try:
            merged = OmegaConf.merge(schema, raw)
            obj = OmegaConf.to_object(merged)
        except OmegaConfBaseException as exc:
            raise config_error(exc, self.kind, schema) from None
        validate_fields(obj, self.kind)
        return obj


def config_error(exc: OmegaConfBaseException, prefix: str, schema: DictConfig) -> ConfigError:
    """Turn an OmegaConf exception into one line naming the full key and the fix."""
    key = str(getattr(exc, "full_key", None) or "")
    field = ".".join(part for part in (prefix, key) if part) or "config"
    if type(exc).__name__ == "ConfigKeyError":
        parent_key = key.rpartition(".")[0]
        parent = OmegaConf.select(schema, parent_key) if parent_key else schema
        allowed = ", ".join(str(k) for k in parent) if isinstance(parent, DictConfig) else ""
        return ConfigError(field, f"unknown key; allowed keys here: {allowed}")
    return ConfigError(field, str(exc).splitlines()[0])
