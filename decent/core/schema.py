"""Config fields that declare their allowed values, and the one walk that checks them.

Every config section is a dataclass. A field declared with one of the constructors below
carries its range (or its choices) in its metadata::

    lr: float = positive(0.05)
    momentum: float = in_range(0.0, 0.0, 1.0, hi_open=True)
    optimizer: str = one_of(("sgd", "adamw"), "sgd")

:func:`validate_fields` walks a config object (nested sections and list elements too) and
raises a :class:`~decent.core.errors.ConfigError` naming the first field outside its
range, with the range in the message. The range lives next to the default, so no value
reaches an optimiser, numpy or torch unchecked, and a test can enumerate every field of
every config class (``checked_fields``) to try an out-of-range value on each.

Checks between fields (say, ``local_steps_min ≤ local_steps``) stay in the section's own
``validate(prefix)``, which runs after these.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import typing
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from decent.core.errors import ConfigError
from decent.core.field_types import NONE, did_you_mean, element, example, optional, wrong_type

CHECK = "check"  # the metadata key of a declared check


@dataclass(frozen=True)
class Check:
    """Allowed values of one field: a numeric interval or a set of choices.

    ``nullable`` lets ``None`` through (an optional field: "not set"). ``integer``
    requires a whole number (for fields typed ``Any``; OmegaConf checks ``int`` fields).
    ``names`` are words allowed besides the interval (``auto``). ``each`` applies the
    check to every element of a list."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    choices: tuple[str, ...] | None = None
    nullable: bool = False
    each: bool = False
    integer: bool = False
    names: tuple[str, ...] = ()

    def allows(self, value: Any) -> bool:
        if value is None:
            return self.nullable
        if isinstance(value, str) and value in self.names:
            return True
        if self.integer and (isinstance(value, bool) or not isinstance(value, int)):
            return False
        if self.choices is not None:
            return value in self.choices
        if self.lo is None and self.hi is None:
            return True
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if isinstance(value, float) and math.isnan(value):
            return False
        if self.lo is not None and (value < self.lo or (self.lo_open and value == self.lo)):
            return False
        above = self.hi is not None and (value > self.hi or (self.hi_open and value == self.hi))
        return not above

    def describe(self) -> str:
        if self.choices is not None:
            text = f"choose one of: {', '.join(self.choices)}"
        elif self.lo is not None and self.hi is not None:
            text = (f"must be in {'(' if self.lo_open else '['}{_num(self.lo)}, "
                    f"{_num(self.hi)}{')' if self.hi_open else ']'}")
        elif self.lo is not None:
            text = f"must be {'>' if self.lo_open else '≥'} {_num(self.lo)}"
        elif self.hi is not None:
            text = f"must be {'<' if self.hi_open else '≤'} {_num(self.hi)}"
        else:
            text = "any value"
        if self.integer:
            text += ", a whole number"
        if self.names:
            text += f", or {' or '.join(self.names)}"
        return text + (" (or null)" if self.nullable else "")

    def bad_values(self) -> list[Any]:
        """Values just outside the allowed set (for tests that try every field)."""
        if self.choices is not None:
            return ["no-such-choice"]
        out: list[Any] = []
        if self.lo is not None:
            out.append(self.lo if self.lo_open else self.lo - 1)
        if self.hi is not None:
            out.append(self.hi if self.hi_open else self.hi + 1)
        if self.integer:
            out.append((self.lo or 0) + 1.5)
        if self.names:
            out.append("no-such-word")
        return out


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def _field(default: Any, check: Check, factory: Callable[[], Any] | None = None) -> Any:
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata={CHECK: check})
    if isinstance(default, (list, dict, set)):
        return dataclasses.field(default_factory=lambda: type(default)(default),
                                 metadata={CHECK: check})
    return dataclasses.field(default=default, metadata={CHECK: check})


def positive(default: Any, *, nullable: bool = False, each: bool = False) -> Any:
    """A number > 0."""
    return _field(default, Check(lo=0, lo_open=True, nullable=nullable, each=each))


def at_least(lo: float, default: Any, *, nullable: bool = False, each: bool = False) -> Any:
    """A number ≥ ``lo``."""
    return _field(default, Check(lo=lo, nullable=nullable, each=each))


def count_or(names: Sequence[str], lo: int, default: Any) -> Any:
    """A whole number ≥ ``lo``, or one of the words ``names`` (e.g. ``auto``)."""
    return _field(default, Check(lo=lo, integer=True, names=tuple(names)))


def in_range(default: Any, lo: float, hi: float, *, lo_open: bool = False,
             hi_open: bool = False, nullable: bool = False, each: bool = False) -> Any:
    """A number in the interval from ``lo`` to ``hi`` (closed unless told otherwise)."""
    return _field(default, Check(lo=lo, hi=hi, lo_open=lo_open, hi_open=hi_open,
                                 nullable=nullable, each=each))


def one_of(choices: Sequence[str], default: Any, *, nullable: bool = False,
           each: bool = False) -> Any:
    """One of a fixed set of names."""
    return _field(default, Check(choices=tuple(choices), nullable=nullable, each=each))


def text(default: str | None = None, *, nullable: bool = True) -> Any:
    """Free text (a name, a path): no range, but declared, so that every field of a
    config says what it accepts."""
    return _field(default, Check(nullable=nullable))


# Upper bound of every seed: torch and numpy take seeds below 2^63 as plain int64.
SEED_MAX = 2**63 - 1


def number(default: float) -> Any:
    """Any finite or infinite number (a target value, say): declared, not bounded."""
    return _field(default, Check())


def seed_field(default: int = 0) -> Any:
    return in_range(default, 0, SEED_MAX)


def check_bools(data: Any, cls: type, prefix: str) -> None:
    """Every ``bool`` field of ``cls`` (and of its nested sections) given in the raw mapping
    ``data`` holds true or false: OmegaConf alone would turn 2 or "yes" into True."""
    if not isinstance(data, dict):
        return
    for name, f, _ in checked_fields(cls):
        if f.type not in ("bool", bool):
            continue
        value: Any = data
        for part in name.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value is not None and not isinstance(value, bool):
            raise ConfigError(f"{prefix}{name}",
                              wrong_type(f"{prefix}{name}", bool, value, f.default) or "")


def checked_fields(
    cls: type, prefix: str = ""
) -> Iterator[tuple[str, dataclasses.Field, Check | None]]:
    """Every field of dataclass ``cls`` and its nested sections, as (dotted name, field,
    declared check or None)."""
    for f in dataclasses.fields(cls):
        name = f"{prefix}{f.name}"
        nested = _nested_dataclass(f)
        if nested is not None:
            yield from checked_fields(nested, f"{name}.")
            continue
        yield name, f, f.metadata.get(CHECK)


# One step of a dotted key: a field's name, or a list index (``hidden[0]``).
_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def field_info(cls: type, key: str) -> tuple[Any, Any, Check | None] | None:
    """(type, default, declared check) of the dotted ``key`` of dataclass ``cls``, through
    nested sections and list elements (``churn.events[0].round``); None where ``key``
    is not a field. The default is :data:`~decent.core.field_types.NONE` where the field
    has none to show (a list element)."""
    tp: Any = cls
    default: Any = NONE
    check: Check | None = None
    for name, index in _STEP.findall(key):
        if index:
            tp, default = element(tp), NONE
            check = check if check is not None and check.each else None
            continue
        owner = optional(tp)[0]
        if not dataclasses.is_dataclass(owner):
            return None
        f = next((f for f in dataclasses.fields(owner) if f.name == name), None)
        if f is None:
            return None
        section = section_default(f)
        # a component's field is typed Any: its default variant says what it holds
        tp = type(section) if section is not None else _hints(owner).get(name, Any)
        default = f.default if f.default is not dataclasses.MISSING else (
            NONE if f.default_factory is dataclasses.MISSING  # type: ignore[misc]
            else f.default_factory())  # type: ignore[misc]
        check = f.metadata.get(CHECK)
    return tp, default, check


def type_error(cls: type, key: str, value: Any, prefix: str = "") -> str | None:
    """The plain message for ``value`` given to the dotted ``key`` of dataclass ``cls``
    (``prefix``: where ``cls`` sits, for the example's key); None where the field's type
    says nothing better than the converter did. An element of a list
    (``model.hidden[0]``) is shown with an example of the whole list, which is what an
    override can set."""
    info = field_info(cls, key)
    if info is None:
        return None
    top = key.split("[", 1)[0]
    outer = field_info(cls, top) if top != key else info
    shown = example(*outer) if outer is not None else NONE
    return wrong_type(f"{prefix}{key}", info[0], value, shown, example_field=f"{prefix}{top}")


def list_holding(cls: type, item: type, prefix: str = "") -> str | None:
    """The dotted name of the field of ``cls`` (or of a nested section) that is a list of
    ``item`` sections (``churn.events`` for a ChurnEvent); None where there is none."""
    for f in dataclasses.fields(cls):
        section = section_default(f)
        if section is not None:
            found = list_holding(type(section), item, f"{prefix}{f.name}.")
            if found is not None:
                return found
        elif element(_hints(cls).get(f.name, Any)) is item:
            return f"{prefix}{f.name}"
    return None


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """``cls``'s resolved field types (its annotations are strings under ``from
    __future__ import annotations``); {} where one cannot be resolved."""
    try:
        return typing.get_type_hints(cls)
    except (NameError, TypeError):
        return {}


def section_default(f: dataclasses.Field) -> Any:
    """The nested section field ``f`` declares (the dataclass instance its factory builds),
    or None for a plain field."""
    if f.default_factory is dataclasses.MISSING:  # type: ignore[misc]
        return None
    try:
        value = f.default_factory()  # type: ignore[misc]
    except TypeError:
        return None
    return value if dataclasses.is_dataclass(value) else None


def _nested_dataclass(f: dataclasses.Field) -> type | None:
    section = section_default(f)
    return None if section is None else type(section)


def validate_fields(obj: Any, prefix: str) -> None:
    """Check every declared field of config object ``obj`` (recursively), then call its own
    ``validate(prefix)`` for the checks between fields."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        name = f"{prefix}.{f.name}" if prefix else f.name
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            validate_fields(value, name)
            continue
        check: Check | None = f.metadata.get(CHECK)
        if check is None:
            continue
        if check.each:
            if value is None:
                if not check.nullable:
                    raise ConfigError(name, "must be a list")
                continue
            for k, item in enumerate(value):
                if not check.allows(item):
                    raise ConfigError(f"{name}[{k}]", f"{check.describe()} (got {item!r})")
        elif not check.allows(value) and check.choices is not None:
            hint = did_you_mean(value, check.choices) if isinstance(value, str) else ""
            raise ConfigError(name, f"{value!r} is not allowed; {check.describe()}{hint}")
        elif not check.allows(value) and (check.lo is not None or check.hi is not None):
            raise ConfigError(name, f"{check.describe()} (got {value!r})")
        elif value is None and not check.nullable:
            raise ConfigError(name, "must be set")
    own = getattr(obj, "validate", None)
    if callable(own):
        own(prefix)
