"""One walk over nested payloads: tensors and other leaves inside dicts, lists and tuples.

Messages, attacks, snapshots and the Ray transport all carry values of the same shape —
say ``{"w": tensor, "extra": [Seed(3), Declared(...)]}`` — and each used to walk it with
its own recursion. They walk it with :func:`tree_map` and :func:`tree_leaves` now, so the
rule for what is a container is written once:

* ``dict`` — its values, in insertion order (keys are kept, never mapped); a dict subclass
  comes back as a plain ``dict``;
* ``list`` / ``tuple`` — its items in order, rebuilt as the same type (a namedtuple by
  its fields);
* a dataclass instance whose type is listed in ``nodes`` — its init fields in declaration
  order, rebuilt with :func:`dataclasses.replace` (e.g. :class:`~decent.core.messages.Declared`
  for walkers that look inside compressed payloads, while :func:`~decent.core.messages.wire_size`
  does not: there it is a leaf that states its own size).

Everything else — tensors, arrays, ``None``, numbers, other dataclasses — is a leaf.
Two knobs pick the leaves: ``leaf`` (a type or tuple of types) makes only its instances
leaves that ``fn`` sees, checked before the containers, and keeps every other leaf as it
is; ``is_leaf`` (a predicate) stops the walk at what it accepts, so ``fn`` sees it whole.
Mapping builds new containers and never changes the ones it walks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

LeafType = type | tuple[type, ...]


def _children(x: Any, nodes: tuple[type, ...]) -> list[tuple[Any, Any]] | None:
    """``(key, child)`` pairs of a container, in walk order; None for a leaf."""
    if isinstance(x, dict):
        return list(x.items())
    if isinstance(x, (list, tuple)):
        return list(enumerate(x))
    if nodes and isinstance(x, nodes) and dataclasses.is_dataclass(x):
        return [(f.name, getattr(x, f.name)) for f in dataclasses.fields(x) if f.init]
    return None


def _rebuild(x: Any, keys: list[Any], values: list[Any]) -> Any:
    """A new container like ``x`` holding ``values`` under ``keys``."""
    if isinstance(x, dict):
        return dict(zip(keys, values, strict=True))
    if isinstance(x, tuple) and hasattr(x, "_fields"):  # namedtuple: positional fields
        return type(x)(*values)
    if isinstance(x, (list, tuple)):
        return type(x)(values)
    return dataclasses.replace(x, **dict(zip(keys, values, strict=True)))


def _beside(other: Any, x: Any, key: Any) -> Any:
    """The child of ``other`` that stands where ``x`` has ``key``, or None where the two
    part: another kind of container, a sequence of another length, a missing key."""
    if isinstance(x, dict):
        return other.get(key) if isinstance(other, dict) else None
    if isinstance(x, (list, tuple)):
        fits = isinstance(other, (list, tuple)) and len(other) == len(x)
        return other[key] if fits else None
    return getattr(other, key, None) if type(other) is type(x) else None


def _stops(x: Any, leaf: LeafType | None, is_leaf: Callable[[Any], bool] | None) -> bool:
    return (leaf is not None and isinstance(x, leaf)) or (is_leaf is not None and is_leaf(x))


def tree_map(fn: Callable[..., Any], tree: Any, *rest: Any, leaf: LeafType | None = None,
             is_leaf: Callable[[Any], bool] | None = None,
             nodes: tuple[type, ...] = ()) -> Any:
    """``tree`` with every leaf ``x`` replaced by ``fn(x, *beside)``.

    ``rest`` are trees walked alongside ``tree``, which alone sets the shape: ``beside``
    holds their values at the same place, None where one has a different shape there
    (restoring a snapshot into a freshly built object that may have changed). With
    ``leaf`` given, leaves that are not its instances are kept as they are."""

    def walk(x: Any, others: tuple[Any, ...]) -> Any:
        if _stops(x, leaf, is_leaf):
            return fn(x, *others)
        children = _children(x, nodes)
        if children is None:
            return x if leaf is not None else fn(x, *others)
        keys = [k for k, _ in children]
        values = [walk(v, tuple(_beside(o, x, k) for o in others)) for k, v in children]
        return _rebuild(x, keys, values)

    return walk(tree, rest)


def tree_leaves(tree: Any, *, leaf: LeafType | None = None,
                is_leaf: Callable[[Any], bool] | None = None,
                nodes: tuple[type, ...] = ()) -> list[Any]:
    """The leaves of ``tree`` in the order :func:`tree_map` visits them: depth first, dict
    values in insertion order, sequence items and dataclass fields in order. With ``leaf``
    given, only its instances."""
    out: list[Any] = []

    def walk(x: Any) -> None:
        if _stops(x, leaf, is_leaf):
            out.append(x)
            return
        children = _children(x, nodes)
        if children is None:
            if leaf is None:
                out.append(x)
            return
        for _, v in children:
            walk(v)

    walk(tree)
    return out
