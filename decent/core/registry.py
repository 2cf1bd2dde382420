"""Named, configurable components (strategies, tasks, models, topologies, compressors,
robust aggregators, attacks).

Each entry pairs a config dataclass with a builder. A config section like
``strategy: {name: dsgd, lr: 0.1}`` is validated against the entry's dataclass through
OmegaConf, so a typo or a wrong type is refused with the field's full name, and then
every field against its declared range (:mod:`decent.core.schema`), before anything runs.
A config class may list keys it no longer has in ``RENAMED`` (old → new): a config that
still uses one is told the new name.

A component may sit inside another's section (a strategy's ``compression``, the faults'
``attack``): such a field declares :func:`component` in its metadata, its default an instance of
the variant used when the config says nothing. Its section is validated against the
variant its own ``name`` selects, so a field that variant does not declare is refused in
one line, like a strategy's. Without a ``name``, or with the default's, the given fields
go over the default's (``compression: {keep: 0.05}`` keeps DSO's Top-K + INT8 and its error
feedback); another name keeps the default's values of the fields both variants declare
and takes that variant's own defaults for the rest.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from decent.core.errors import ConfigError
from decent.core.schema import check_bools, validate_fields
from decent.core.storable import storable

# the metadata key of a field holding a nested component: the Registry its name selects
COMPONENT = "component"


def component(registry: Registry) -> dict[str, Registry]:
    """The metadata of a field holding a component of ``registry`` (its section validated
    against the variant its ``name`` picks): ``compression: Any =
    field(default_factory=TopKConfig, metadata=component(COMPRESSORS))``, the factory
    building the variant used when the config gives none."""
    return {COMPONENT: registry}


def component_fields(cls: type) -> dict[str, Registry]:
    """The fields of dataclass ``cls`` declared with :func:`component`, and their registry."""
    return {f.name: f.metadata[COMPONENT] for f in dataclasses.fields(cls)
            if COMPONENT in f.metadata}


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

    def entry(self, name: str, prefix: str | None = None) -> Entry:
        if name not in self._entries:
            raise ConfigError(
                f"{prefix or self.kind}.name",
                f"unknown {self.kind} '{name}'; choose one of: {', '.join(self.names)}",
            )
        return self._entries[name]

    def config(self, section: DictConfig | dict[str, Any] | str | Any,
               prefix: str | None = None, default: Any = None) -> Any:
        """Validate a config section and return an instance of the entry's dataclass.

        ``prefix`` is where the section sits (``strategy.compression``; default: the
        kind), for the field names of errors. ``default`` (a config instance) is the
        variant a section without a ``name`` means, and whose fields a section naming the
        same variant is given over. A bare name (``aggregator: median``) is a section with
        only that name."""
        prefix = prefix or self.kind
        raw = _plain(section, prefix)
        if default is not None and str(raw.get("name", default.name)) == str(default.name):
            raw = {**_plain(default, prefix), **raw}
        name = raw.get("name")
        if name is None:
            raise ConfigError(
                f"{prefix}.name", f"missing; choose one of: {', '.join(self.names)}"
            )
        cls = self.entry(str(name), prefix).config
        if default is not None and str(name) != str(default.name):
            # another variant: it keeps what the default says of the fields it shares
            # (DSO's error feedback stays on with any compressor), its own defaults else
            own = {f.name for f in dataclasses.fields(cls)} - {"name"}
            raw = {**{k: v for k, v in _plain(default, prefix).items() if k in own}, **raw}
        for old, new in getattr(cls, "RENAMED", {}).items():
            if old in raw:
                raise ConfigError(f"{prefix}.{old}", f"renamed: write {prefix}.{new} "
                                  f"(same meaning) for {self.kind} {name}")
        # nested components are validated by their own registries, after this section
        nested = {key: raw.pop(key) for key in component_fields(cls) if key in raw}
        check_bools(raw, cls, f"{prefix}.")
        schema = structured(cls)
        try:
            merged = OmegaConf.merge(schema, OmegaConf.create(raw))
            obj = OmegaConf.to_object(merged)
        except OmegaConfBaseException as exc:
            raise config_error(exc, prefix, schema) from None
        obj = resolve_components(obj, nested, prefix)
        validate_fields(obj, prefix)
        return obj


def resolve_components(obj: Any, given: dict[str, Any], prefix: str) -> Any:
    """``obj`` with each nested component section of ``given`` validated by its registry
    (over the variant ``obj`` holds by default); a copy when ``obj`` is frozen."""
    fields = component_fields(type(obj))
    built = {key: fields[key].config(value, f"{prefix}.{key}" if prefix else key,
                                     default=getattr(obj, key))
             for key, value in given.items() if value is not None}
    if not built:
        return obj
    params = getattr(type(obj), "__dataclass_params__", None)
    if params is not None and params.frozen:
        return dataclasses.replace(obj, **built)
    for key, value in built.items():
        setattr(obj, key, value)
    return obj


def _plain(section: Any, prefix: str) -> dict[str, Any]:
    """A section as a plain mapping: a bare name means ``{name: ...}``; a config instance
    gives its own fields (nested ones kept as instances)."""
    if isinstance(section, str):
        return {"name": section}
    if isinstance(section, DictConfig):
        return dict(OmegaConf.to_container(section))  # type: ignore[arg-type]
    if dataclasses.is_dataclass(section) and not isinstance(section, type):
        return {f.name: getattr(section, f.name) for f in dataclasses.fields(section)}
    if isinstance(section, dict):
        return dict(section)
    raise ConfigError(prefix, f"must be a mapping with a 'name' key, e.g. {prefix}: "
                      f"{{name: ...}} (got {section!r})")


@functools.cache
def structured(cls: type) -> DictConfig:
    """``OmegaConf.structured(cls)``, built once per class: merging over it never changes
    it (OmegaConf.merge copies), and building it walks every field's default (the bulk
    of validating a config)."""
    return OmegaConf.structured(cls)


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
