"""A checkpoint's state as tensors and plain data, so that loading it runs no code.

``torch.load(..., weights_only=True)`` (PyTorch's default since 2.6) unpickles tensors,
dicts, lists, tuples, strings, numbers and a short list of torch types, and refuses
anything else: a pickle planted in a downloaded or shared run directory cannot import and
call what it likes. A client's captured state (:mod:`decent.core.snapshot`) also holds
classes (a strategy's state dataclass, a message in flight), sets, deques and numpy
arrays; :func:`encode` turns each into a tagged dict of plain data, and :func:`decode`
turns them back, looking a class up by name only among decent's own classes and those
of the modules that registered a strategy, task or model in this process (a method
written outside decent keeps its state dataclass beside it). A stored name never imports
a module that is not decent's own.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from collections import deque
from typing import Any

import numpy as np
import torch

from decent.core.errors import ConfigError

TAG = "__decent__"  # the key that marks an encoded value (a dict with kind and data)
OWN = "decent."  # decent's own package: its modules are imported when a name needs one


def registered_modules() -> set[str]:
    """The modules of the components registered in this process."""
    from decent.models.registry import MODELS
    from decent.strategies.registry import STRATEGIES
    from decent.tasks.registry import TASKS

    return STRATEGIES.modules() | TASKS.modules() | MODELS.modules()


def allowed(module: str) -> bool:
    return module.startswith(OWN) or module in registered_modules()


def encode(value: Any) -> Any:
    """``value`` with every non-plain part replaced by a tagged dict of plain data."""
    if isinstance(value, torch.Tensor) or value is None or \
            isinstance(value, (str, bool, int, float, torch.dtype, torch.device)):
        return value
    if isinstance(value, dict):
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
                "bytes": torch.frombuffer(bytearray(value.tobytes()), dtype=torch.uint8)}
    if isinstance(value, np.generic):
        return {TAG: "npscalar", "dtype": value.dtype.str, "value": value.item()}
    if isinstance(value, bytes):
        return {TAG: "bytes", "data": torch.frombuffer(bytearray(value), dtype=torch.uint8)}
    if isinstance(value, type):
        return {TAG: "class", "name": class_name(value)}
    if dataclasses.is_dataclass(value):
        return {TAG: "dataclass", "class": class_name(type(value)),
                "fields": {f.name: encode(getattr(value, f.name))
                           for f in dataclasses.fields(value)}}
    raise TypeError(f"a checkpoint cannot store a {type(value).__qualname__}: keep "
                    "tensors, numbers, strings, containers and dataclasses in state")


def class_name(cls: type) -> str:
    if not allowed(cls.__module__):
        raise TypeError(f"a checkpoint stores classes by name only from decent or from a "
                        f"module that registered a component, not {cls.__module__}."
                        f"{cls.__qualname__}: keep that state as tensors and plain data")
    return f"{cls.__module__}:{cls.__qualname__}"


def decode(value: Any, source: str = "checkpoint") -> Any:
    """The inverse of :func:`encode`; ``source`` names the file in an error."""
    if isinstance(value, dict):
        if TAG not in value:
            return {k: decode(v, source) for k, v in value.items()}
        return _decode_tagged(value, source)
    if isinstance(value, list):
        return [decode(v, source) for v in value]
    if isinstance(value, tuple):
        return tuple(decode(v, source) for v in value)
    return value


def _decode_tagged(value: dict[str, Any], source: str) -> Any:
    kind = value[TAG]
    if kind == "dict":
        return {_key(decode(k, source)): decode(v, source) for k, v in value["items"]}
    if kind in ("set", "frozenset"):
        items = (decode(v, source) for v in value["items"])
        return set(items) if kind == "set" else frozenset(items)
    if kind == "deque":
        return deque((decode(v, source) for v in value["items"]), maxlen=value["maxlen"])
    if kind == "ndarray":
        raw = value["bytes"].numpy().tobytes()
        return np.frombuffer(raw, dtype=np.dtype(value["dtype"])).reshape(value["shape"]).copy()
    if kind == "npscalar":
        return np.dtype(value["dtype"]).type(value["value"])
    if kind == "bytes":
        return value["data"].numpy().tobytes()
    if kind == "class":
        return lookup(value["name"], source)
    if kind == "dataclass":
        cls = lookup(value["class"], source)
        fields = {name: decode(v, source) for name, v in value["fields"].items()}
        # no __init__ (it may validate or derive fields): the stored fields, as they were
        target = cls.__new__(cls)
        for name, v in fields.items():
            object.__setattr__(target, name, v)
        return target
    raise ConfigError("run_dir", f"{source}: unknown stored kind {kind!r}; the file was "
                      "not written by this version of decent")


def _key(key: Any) -> Any:
    return tuple(key) if isinstance(key, list) else key


def lookup(name: str, source: str) -> type:
    """A class of decent's own by its stored ``module:qualname``; one line for any other
    (a stored name is data: it is never imported from elsewhere)."""
    module, _, qualname = name.partition(":")
    if not allowed(module):
        raise ConfigError("run_dir", f"{source} names the class {name}, which is neither "
                          "decent's own nor of a registered component; refusing to load it")
    try:
        # decent's own modules may be imported; any other is one already imported here
        found: Any = (importlib.import_module(module) if module.startswith(OWN)
                      else sys.modules[module])
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError, KeyError):
        raise ConfigError("run_dir", f"{source} names the class {name}, which this "
                          "version of decent does not have; resume with the version that "
                          "wrote it") from None
    if not isinstance(found, type):
        raise ConfigError("run_dir", f"{source} names {name}, which is not a class")
    return found
