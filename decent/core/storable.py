"""The classes a checkpoint may name, and the fields each may hold.

A checkpoint is data: loading one must not be able to build an object whose construction,
attribute setting or deletion does something (a standard-library helper that deletes a
file when discarded is one stored name away from any module that imports it). So a stored
class name is looked up in this table, filled by registration, never by importing a module
and walking its attributes; and an object is rebuilt only with the fields its class
declares (a dataclass's own fields, or the ones a plain class lists when it registers).

Decent registers the classes its components keep in state (messages in flight, optimiser
helpers, strategies' per-process objects); a strategy's ``State`` is registered with the
strategy itself (:class:`decent.core.registry.Registry`), so a method written in a user's
own module resumes like decent's own. Any other class a user's method keeps in state
registers with :func:`storable`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T", bound=type)


@dataclass(frozen=True)
class Storable:
    """A class a checkpoint may name, with the fields a stored instance may have."""

    cls: type
    fields: frozenset[str]


_TABLE: dict[str, Storable] = {}


def stored_name(cls: type) -> str:
    """The name a checkpoint stores ``cls`` under (its module and qualified name: the
    format checkpoints have always used)."""
    return f"{cls.__module__}:{cls.__qualname__}"


def storable(cls: T | None = None, *, fields: Iterable[str] | None = None) -> Any:
    """Allow checkpoints to hold instances of ``cls``. A dataclass may hold its declared
    fields; a plain class names the attributes it keeps in ``fields``. As a decorator:
    ``@storable`` or ``@storable(fields=("memory",))``."""

    def add(target: T) -> T:
        if fields is not None:
            names = frozenset(fields)
        elif dataclasses.is_dataclass(target):
            names = frozenset(f.name for f in dataclasses.fields(target))
        else:
            raise TypeError(f"{target.__qualname__} is not a dataclass: register it with "
                            "storable(fields=(...)) naming the attributes it keeps")
        _TABLE[stored_name(target)] = Storable(target, names)
        return target

    return add if cls is None else add(cls)


def entry(name: str) -> Storable | None:
    """The registered class stored as ``name``, if any."""
    return _TABLE.get(name)


def registered(cls: type) -> Storable | None:
    found = _TABLE.get(stored_name(cls))
    return found if found is not None and found.cls is cls else None


def names() -> list[str]:
    return sorted(_TABLE)

