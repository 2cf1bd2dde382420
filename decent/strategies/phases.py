"""Phases declared as data: which method runs a phase, and for which role.

A strategy marks each phase method with :func:`phase`; the class collects the marks into
its phase table when it is defined, so a method is known to be a phase (and a helper is
not), and a phase name the round's schedule uses but no method declares is refused when
the strategy is built, in one line, rather than failing mid-run with an AttributeError.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from decent.core.errors import StrategyError

# The roles a client can have. Workers hold the training data; a server (FedAvg's vertex
# 0) or an aggregator (DSO's upper tier) holds none. A strategy lists the roles it uses
# in ``Strategy.roles``; a phase declared for no role in particular runs for every one.
WORKER = "worker"
SERVER = "server"
AGGREGATOR = "aggregator"

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Phase:
    """One row of a phase table: the phase ``name`` runs ``method`` (an attribute name of
    the strategy, so a subclass that overrides the method runs its own) for the clients of
    ``role`` (None: every client)."""

    name: str
    role: str | None
    method: str


def phase(name: str | None = None, role: str | None = None) -> Callable[[F], F]:
    """Declare the decorated method as the phase ``name`` (default: the method's own name)
    for the clients of ``role`` (default: every client). One phase may be declared by
    several methods, one per role (DSO's ``reveal``: workers reveal, aggregators file the
    commitments)."""

    def mark(fn: F) -> F:
        fn.__phase__ = (name or fn.__name__, role)  # type: ignore[attr-defined]
        return fn

    return mark


def collect(cls: type, roles: tuple[str, ...]) -> tuple[Phase, ...]:
    """The phase table of ``cls``: its own and inherited :func:`phase` marks, in the order
    they are first defined (base classes first). A method overridden without a mark keeps
    its base's declaration."""
    marks: dict[str, tuple[str, str | None]] = {}
    for klass in reversed(cls.__mro__):
        for attr, value in vars(klass).items():
            mark = getattr(value, "__phase__", None)
            if mark is not None:
                marks[attr] = mark
    table = tuple(Phase(n, r, attr) for attr, (n, r) in marks.items())
    seen: dict[str, list[str | None]] = {}
    for row in table:
        if row.role is not None and row.role not in roles:
            raise StrategyError(
                f"strategy class {cls.__name__}: phase '{row.name}' (method {row.method}) is "
                f"declared for role '{row.role}', which is not one of its roles {roles}")
        taken = seen.setdefault(row.name, [])
        if row.role in taken or (taken and (row.role is None or None in taken)):
            raise StrategyError(
                f"strategy class {cls.__name__}: phase '{row.name}' is declared twice for "
                f"the same clients (method {row.method}): give each method its own role")
        taken.append(row.role)
    return table
