"""A checkpoint's state as tensors and plain data, so that loading it runs no code.

``torch.load(..., weights_only=True)`` (PyTorch's default since 2.6) unpickles tensors,
dicts, lists, tuples, strings, numbers and a short list of torch types, and refuses
anything else: a pickle planted in a downloaded or shared run directory cannot import and
call what it likes. A client's captured state (:mod:`decent.core.snapshot`) also holds
classes (a strategy's state dataclass, a message in flight), sets, deques and numpy
arrays; :func:`encode` turns each into a tagged dict of plain data, and :func:`decode`
turns them back. A stored class name is looked up in the allow-list of registered classes
(:mod:`decent.core.storable`), never imported or walked attribute by attribute, and an
object is rebuilt only with the fields its class declares: anything else is refused in one
line naming the file and the key, before any object of it is built.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import torch

from decent.core import snapshot, storable
from decent.core.errors import ConfigError

TAG = "__decent__"  # the key that marks an encoded value (a dict with kind and data)
# a captured object (snapshot): {tag: (class, fields)}, rebuilt when it is restored
CAPTURED = (snapshot.DATACLASS, snapshot.OBJECT)


def register_components() -> None:
    """Import decent's registries: their modules register the classes decent stores."""
    import decent.models.registry
    import decent.strategies.registry
    import decent.tasks.registry  # noqa: F401


def encode(value: Any) -> Any:
    """``value`` with every non-plain part replaced by a tagged dict of plain data."""
    if isinstance(value, torch.Tensor) or value is None or \
            isinstance(value, (str, bool, int, float, torch.dtype, torch.device)):
        return value
    if isinstance(value, dict):
        if len(value) == 1 and next(iter(value)) in CAPTURED:
            cls, fields = next(iter(value.values()))
            undeclared(cls, fields)
        if TAG in value or not all(isinstance(k, (str, int, tuple)) for k in value):
            return {TAG: "dict", "items": [[encode(k), encode(v)] for k, v in value.items()]}
        return {k: encode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, tuple):
        return tuple(encode(v) for v in value)
    if isinstance(value, (set, frozenset)):
        # sorted where the items allow it, so that equal states store equal bytes
        items = sorted(value, key=repr)
        return {TAG: "frozenset" if isinstance(value, frozenset) else "set",
                "items": [encode(v) for v in items]}
    if isinstance(value, deque):
        return {TAG: "deque", "items": [encode(v) for v in value], "maxlen": value.maxlen}
    if isinstance(value, np.ndarray):
        return {TAG: "ndarray", "dtype": value.dtype.str, "shape": list(value.shape),
                "bytes": _byte_tensor(value.tobytes())}
    if isinstance(value, np.generic):
        return {TAG: "npscalar", "dtype": value.dtype.str, "value": value.item()}
    if isinstance(value, bytes):
        return {TAG: "bytes", "data": _byte_tensor(value)}
    if isinstance(value, type):
        return {TAG: "class", "name": class_name(value)}
    if dataclasses.is_dataclass(value):
        return {TAG: "dataclass", "class": class_name(type(value)),
                "fields": {f.name: encode(getattr(value, f.name))
                           for f in dataclasses.fields(value)}}
    raise TypeError(f"a checkpoint cannot store a {type(value).__qualname__}: keep "
                    "tensors, numbers, strings, containers and dataclasses in state")


def _byte_tensor(data: bytes) -> torch.Tensor:
    """``data`` as a uint8 tensor (torch.frombuffer refuses an empty buffer: an empty
    array, a client that holds no update yet, is stored too)."""
    if not data:
        return torch.zeros(0, dtype=torch.uint8)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def class_name(cls: type) -> str:
    if storable.registered(cls) is None:
        raise TypeError(f"a checkpoint stores only registered classes, not "
                        f"{cls.__module__}.{cls.__qualname__}: register it with "
                        "decent.core.storable.storable, or keep that state as tensors and "
                        "plain data")
    return storable.stored_name(cls)


def undeclared(cls: type, fields: dict[str, Any]) -> None:
    """Writing: ``cls`` keeps only the fields it registered (else resume would refuse)."""
    entry = storable.registered(cls)
    extra = sorted(set(fields) - entry.fields) if entry is not None else []
    if extra:
        raise TypeError(f"{cls.__qualname__} keeps {', '.join(extra)}, which its "
                        "registration (storable fields) does not declare")


def decode(value: Any, source: str = "checkpoint", at: str = "") -> Any:
    """The inverse of :func:`encode`; ``source`` and ``at`` (the key path) name the file and
    the key in an error. Nothing is built of a value that is refused."""
    if isinstance(value, dict):
        if TAG in value:
            return _decode_tagged(value, source, at)
        out = {k: decode(v, source, f"{at}.{k}" if at else str(k)) for k, v in value.items()}
        if len(out) == 1 and next(iter(out)) in CAPTURED:
            _check_captured(out, source, at)
        return out
    if isinstance(value, list):
        return [decode(v, source, f"{at}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, tuple):
        return tuple(decode(v, source, f"{at}[{i}]") for i, v in enumerate(value))
    if isinstance(value, torch.Tensor) and type(value) not in (torch.Tensor,
                                                               torch.nn.Parameter):
        raise refused(source, at, f"a tensor subclass {type(value).__qualname__}")
    return value


def refused(source: str, at: str, what: str) -> ConfigError:
    return ConfigError("run_dir", f"{source}: refused at key {at or '(top)'!r}: {what} "
                       "(decent never writes that: the file was altered; do not resume "
                       "this run directory)")


def _check_captured(value: dict[str, Any], source: str, at: str) -> None:
    """A captured object (rebuilt later, when restored): a registered class and only the
    fields it declares."""
    captured = next(iter(value.values()))
    if not (isinstance(captured, tuple) and len(captured) == 2 and isinstance(captured[0], type)
            and isinstance(captured[1], dict)):
        raise refused(source, at, "a captured object that is not (class, fields)")
    cls, fields = captured
    _check_fields(cls, fields, source, at)


def _check_fields(cls: type, fields: dict[str, Any], source: str, at: str) -> None:
    entry = storable.registered(cls)
    extra = sorted(set(fields) - entry.fields) if entry is not None else list(fields)
    if extra:
        raise refused(source, f"{at}.{extra[0]}", f"the field {extra[0]!r}, which "
                      f"{cls.__qualname__} does not declare")


# each stored kind and the keys it holds beside the tag
KINDS = {"dict": {"items"}, "set": {"items"}, "frozenset": {"items"},
         "deque": {"items", "maxlen"}, "ndarray": {"dtype", "shape", "bytes"},
         "npscalar": {"dtype", "value"}, "bytes": {"data"}, "class": {"name"},
         "dataclass": {"class", "fields"}}


def _decode_tagged(value: dict[str, Any], source: str, at: str) -> Any:
    kind = value[TAG]
    if kind not in KINDS:
        raise refused(source, at, f"an unknown stored kind {kind!r}")
    extra = sorted(set(value) - KINDS[kind] - {TAG})
    if extra:
        raise refused(source, f"{at}.{extra[0]}", f"the key {extra[0]!r} in a stored {kind}")
    if kind == "dict":
        return {_key(decode(k, source, at)): decode(v, source, f"{at}[{i}]")
                for i, (k, v) in enumerate(value["items"])}
    if kind in ("set", "frozenset"):
        items = [decode(v, source, at) for v in value["items"]]
        return set(items) if kind == "set" else frozenset(items)
    if kind == "deque":
        return deque((decode(v, source, at) for v in value["items"]), maxlen=value["maxlen"])
    if kind == "ndarray":
        dtype = np.dtype(value["dtype"])
        if dtype.hasobject:
            raise refused(source, at, "a numpy array of Python objects")
        raw = value["bytes"].numpy().tobytes()
        return np.frombuffer(raw, dtype=dtype).reshape(value["shape"]).copy()
    if kind == "npscalar":
        return np.dtype(value["dtype"]).type(value["value"])
    if kind == "bytes":
        return value["data"].numpy().tobytes()
    if kind == "class":
        return lookup(value["name"], source, at)
    # a dataclass: its fields checked before it is built, then set without __init__ (which
    # may validate or derive fields): the stored fields, as they were
    cls = lookup(value["class"], source, at)
    raw_fields = value["fields"]
    if not isinstance(raw_fields, dict):
        raise refused(source, at, "dataclass fields that are not a mapping")
    _check_fields(cls, raw_fields, source, f"{at}.fields" if at else "fields")
    fields = {name: decode(v, source, f"{at}.{name}") for name, v in raw_fields.items()}
    target = cls.__new__(cls)
    for name, v in fields.items():
        object.__setattr__(target, name, v)
    return target


def _key(key: Any) -> Any:
    return tuple(key) if isinstance(key, list) else key


def lookup(name: Any, source: str, at: str = "") -> type:
    """The registered class stored as ``name``; one line for any other (a stored name is
    data: it is looked up in the allow-list, never imported or walked)."""
    register_components()
    entry = storable.entry(name) if isinstance(name, str) else None
    if entry is None:
        raise ConfigError("run_dir", f"{source}: refused at key {at or '(top)'!r}: the class "
                          f"{name} is not one a component registered as storable (the file "
                          "was altered, or was written with an imports: module this config "
                          "does not load); do not resume this run directory")
    return entry.cls


# each file's keys: anything else is refused (an extra key is where a gadget would hide)
CLIENT_KEYS = {"model", "state", "generator", "rng_states", "attack", "private_steps",
               "sampler"}
PROCESS_KEYS = {"shared", "base"}
ROUTER_KEYS = {"router", "lost"}
ROUTER_FIELDS = {"ready", "later", "phase_no", "present", "total_edge_bytes", "total_bytes",
                 "due"}


def keys_problem(path: Path, stored: Any) -> str | None:
    """The first key of a stored file that decent never writes there, if any."""
    rel = f"{path.parent.name}/{path.name}" if path.parent.name == "clients" else path.name
    allowed = (CLIENT_KEYS if rel.startswith("clients/") else
               PROCESS_KEYS if rel == "process.pt" else ROUTER_KEYS if rel == "router.pt"
               else set())
    if not isinstance(stored, dict):
        return "(top)"
    extra = sorted(map(str, set(stored) - allowed))
    if extra:
        return extra[0]
    if rel == "router.pt":
        router = stored.get("router")
        if not isinstance(router, dict):
            return "router"
        extra = sorted(map(str, set(router) - ROUTER_FIELDS))
        return f"router.{extra[0]}" if extra else None
    return None
