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

import contextlib
import dataclasses
import functools
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf, ValueNode
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from decent.core.errors import ConfigError
from decent.core.field_types import did_you_mean, optional, wrong_type
from decent.core.schema import (
    check_bools,
    field_info,
    list_holding,
    type_error,
    validate_fields,
)
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

    def declaring(self, key: str) -> list[str]:
        """The names of the entries whose config has a field ``key``."""
        return [name for name in self.names
                if any(f.name == key for f in dataclasses.fields(self._entries[name].config))]

    def entry(self, name: str, prefix: str | None = None) -> Entry:
        if name not in self._entries:
            raise ConfigError(
                f"{prefix or self.kind}.name",
                f"unknown {self.kind} '{name}'; choose one of: {', '.join(self.names)}"
                f"{did_you_mean(name, self.names)}",
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
        try:
            merged = merged_over(cls, OmegaConf.create(raw))
            obj = OmegaConf.to_object(merged)
        except OmegaConfBaseException as exc:
            raise config_error(exc, prefix, cls, self) from None
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


@functools.cache
def _pickled(cls: type) -> bytes | None:
    """The schema of ``cls`` pickled, or None where it cannot be (a class defined inside
    a function): unpickling it is ~5× faster than the deep copy OmegaConf.merge makes."""
    try:
        return pickle.dumps(structured(cls))
    except (pickle.PicklingError, AttributeError, TypeError):
        return None


def merged_over(cls: type, *layers: Any) -> DictConfig:
    """``OmegaConf.merge(structured(cls), *layers)``, merged into a fresh copy of the
    schema without OmegaConf's deep copy of it (a config is validated several times a
    run, and thousands of times in a sweep's expansion). ``layers`` are consumed: their
    nodes may be moved into the result."""
    blob = _pickled(cls)
    fresh = None
    if blob is not None:
        with contextlib.suppress(Exception):  # its module is gone: the deep copy
            fresh = pickle.loads(blob)
    # a module imported again holds a new class of the same name: the schema must be cls's
    if fresh is None or OmegaConf.get_type(fresh) is not cls:
        return OmegaConf.merge(structured(cls), *layers)  # type: ignore[return-value]
    return OmegaConf.unsafe_merge(fresh, *layers)  # type: ignore[return-value]


def config_error(exc: OmegaConfBaseException, prefix: str, cls: type,
                 registry: Registry | None = None) -> ConfigError:
    """Turn OmegaConf's refusal of a section of dataclass ``cls`` (sitting at ``prefix``)
    into one line naming the full key and the fix: an unknown key lists the keys allowed
    there and the nearest one (or, in a component of ``registry``, the components that do
    declare it); a value of the wrong type says what the field expects, with an example."""
    key = str(getattr(exc, "full_key", None) or "")
    word = exc.key if isinstance(getattr(exc, "key", None), str) else ""
    at = f"{prefix}." if prefix else ""
    parent_key = key[: -len(word)].rstrip(".") if word and key.endswith(word) else \
        key.rpartition(".")[0]
    parent = field_info(cls, parent_key)
    owner = getattr(exc, "object_type", None)
    if dataclasses.is_dataclass(owner) and (parent is None or optional(parent[0])[0] is not owner):
        # a key inside an element of a list of sections (a churn event): OmegaConf's key
        # has lost the way to it, so the list is named
        where = list_holding(cls, owner)  # type: ignore[arg-type]
        if where is not None:
            return _in_element(exc, f"{at}{where}", owner, word)  # type: ignore[arg-type]
    field = ".".join(part for part in (prefix, key) if part) or "config"
    if isinstance(exc, ConfigKeyError):
        owner = optional(parent[0])[0] if parent is not None else None
        names = [f.name for f in dataclasses.fields(owner)] \
            if dataclasses.is_dataclass(owner) else []
        hint = _unknown_key_hint(word or key.rpartition(".")[2], names, prefix, parent_key,
                                 registry)
        return ConfigError(field, f"unknown key; allowed keys here: {', '.join(names)}{hint}")
    if isinstance(exc, ValidationError):
        message = type_error(cls, key, _given(getattr(exc, "value", None)), at)
        if message is not None:
            return ConfigError(field, message)
    return ConfigError(field, str(exc).splitlines()[0])


def _unknown_key_hint(word: str, names: list[str], prefix: str, parent_key: str,
                      registry: Registry | None) -> str:
    """What to write instead of the unknown key ``word`` among the keys ``names`` of the
    section at ``prefix.parent_key``: the nearest key; the nested form of a dotted key
    written in a file; the variants of ``registry`` that declare it."""
    where = ".".join(part for part in (prefix, parent_key) if part)
    head, _, rest = word.partition(".")
    if rest and head in names:  # `strategy.lr: 0.1` at the top of a file
        inside = f" inside {where}" if where else ""
        return f"; in a file, nest it: {head}: {{{rest}: ...}}{inside}"
    owners = registry.declaring(word) if registry is not None and not parent_key else []
    if owners:  # a field of another variant: naming it beats the nearest spelling
        how = f"={owners[0]}" if len(owners) == 1 else " to one of them"
        return f"; {word} is a field of {registry.kind} {', '.join(owners)} (set " \
               f"{prefix}.name{how})"
    return did_you_mean(word, names, f"{where}." if where else "")


def _in_element(exc: OmegaConfBaseException, where: str, item: type, word: str) -> ConfigError:
    """The refusal of key ``word`` of an element (a section of dataclass ``item``) of the
    list ``where``."""
    names = [f.name for f in dataclasses.fields(item)]
    if isinstance(exc, ConfigKeyError):
        return ConfigError(where, f"an element has the unknown key {word!r}; allowed keys "
                           f"there: {', '.join(names)}{did_you_mean(word, names)}")
    info = field_info(item, word)
    message = wrong_type(word, info[0], _given(getattr(exc, "value", None))) \
        if info is not None else None
    return ConfigError(where, f"an element's {word}: {message or str(exc).splitlines()[0]}")


def _given(value: Any) -> Any:
    """The value a user wrote, out of the OmegaConf node that held it in an error."""
    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value)
    if isinstance(value, ValueNode):
        return value._value()
    return value
