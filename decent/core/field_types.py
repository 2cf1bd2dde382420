"""A config field's type in plain words: the one line for a value of the wrong type, and
the nearest name for a misspelt key or choice.

OmegaConf converts what a user writes to the types the config dataclasses declare, and
its refusals speak of its own classes (``AnyNode is not a ListConfig``). The refusal is
worded here from what the field declares instead, so that every field of every section
and registered component says the same kind of thing::

    model.hidden: expected a list of ints, e.g. model.hidden=[64] (got 64)
    strategy.lr: expected a number, e.g. strategy.lr=0.05 (got 'fast')

The example is the field's default where that is a value worth copying, else one built
from its type and declared check.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from collections.abc import Iterable
from typing import Any

# "Nothing to show": distinct from None, which is a value (`null`) a field may hold.
NONE = dataclasses.MISSING

_ONE = {bool: "true or false", int: "a whole number", float: "a number", str: "text"}
_MANY = {bool: "true/false values", int: "ints", float: "numbers", str: "strings"}
# A word that reads the same after `key=` on a command line and in YAML.
_PLAIN = re.compile(r"[\w./-]+")
# Tried in order for a field with no default to show: the first its check allows.
_CANDIDATES: dict[type, tuple[Any, ...]] = {int: (1, 0, 2, 8, 100),
                                             float: (0.1, 0.5, 1.0, 0.0, 10.0)}


def did_you_mean(word: str, options: Iterable[Any], prefix: str = "") -> str:
    """``; did you mean <prefix><option>?`` for the option closest to ``word`` (difflib's
    measure), or "" when none is close: a suggestion only where it is likely right."""
    match = difflib.get_close_matches(str(word), [str(o) for o in options], n=1)
    return f"; did you mean {prefix}{match[0]}?" if match else ""


def optional(tp: Any) -> tuple[Any, bool]:
    """``tp`` without its ``None`` member, and whether it had one (``int | None``); a union
    of several types stays as it is (no field declares one: OmegaConf takes none)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(args) == 2:
            return rest[0], True
    return tp, False


def element(tp: Any) -> Any:
    """The element type of a list type (``Any`` when it does not say)."""
    args = typing.get_args(optional(tp)[0])
    return args[0] if args else Any


def _is_list(tp: Any) -> bool:
    return tp is list or typing.get_origin(tp) is list


def describe(tp: Any) -> str | None:
    """What a value of type ``tp`` is, in words; None where the type says nothing."""
    inner, nullable = optional(tp)
    text = _describe(inner)
    return None if text is None else f"{text} or null" if nullable else text


def _describe(tp: Any) -> str | None:
    if tp in _ONE:
        return _ONE[tp]
    if _is_list(tp):
        item = element(tp)
        if item in _MANY:
            return f"a list of {_MANY[item]}"
        if dataclasses.is_dataclass(item):
            return f"a list of mappings ({_keys(item)})"
        return "a list"
    if tp is dict or typing.get_origin(tp) is dict:
        return "a mapping of keys to values"
    if dataclasses.is_dataclass(tp):
        return f"a mapping of its fields ({_keys(tp)})"
    return None


def _keys(cls: Any) -> str:
    return ", ".join(f.name for f in dataclasses.fields(cls))


def example(tp: Any, default: Any = NONE, check: Any = None) -> Any:
    """A value of type ``tp`` to show: ``default`` where it is one (not unset, not empty,
    allowed by ``check``), else one built from the type; :data:`NONE` where nothing fits
    (free text, a mapping)."""
    if _worth_showing(default) and (check is None or _allowed(check, default)):
        return default
    inner = optional(tp)[0]
    if _is_list(inner):
        item = example(element(inner), NONE, check if getattr(check, "each", False) else None)
        return NONE if item is NONE else [item]
    if inner is bool:
        return True
    if inner is str and getattr(check, "choices", None):
        return check.choices[0]
    for value in _CANDIDATES.get(inner, ()):
        if check is None or _allowed(check, value):
            return value
    return NONE


def _worth_showing(value: Any) -> bool:
    if value is NONE or value is None or dataclasses.is_dataclass(value):
        return False
    if isinstance(value, str):  # a sentence (a prompt template) would not read as a value
        return _PLAIN.fullmatch(value) is not None
    return not (isinstance(value, (list, dict)) and not value)


def _allowed(check: Any, value: Any) -> bool:
    items = value if getattr(check, "each", False) and isinstance(value, list) else [value]
    return all(check.allows(item) for item in items)


def render(value: Any) -> str:
    """``value`` as it is written after ``key=`` on a command line (YAML's flow style)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(render(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {render(v)}" for k, v in value.items()) + "}"
    return str(value)


def got(value: Any) -> str:
    """The value a user gave, for ``(got ...)``: quoted when it is text, so that a word
    stands out from a number."""
    return repr(value) if isinstance(value, str) else render(value)


def wrong_type(field: str, tp: Any, value: Any, shown: Any = NONE,
               example_field: str | None = None) -> str | None:
    """The message for ``value`` given to ``field`` of type ``tp``: what was expected, an
    example (``example_field=shown``, the field itself by default), what was given. None
    where the type says nothing a user could act on."""
    expected = describe(tp)
    if expected is None:
        return None
    shown_at = example_field or field
    eg = "" if shown is NONE else f", e.g. {shown_at}={render(shown)}"
    return f"expected {expected}{eg} (got {got(value)})"
