"""Saving and restoring live objects (a client's typed state, a process's shared object)
for checkpoints, without breaking what they share with the model.

:func:`capture` turns a value into a picklable copy: tensors are cloned to the CPU,
optimisers become their ``state_dict``, generators their state, dataclasses and plain
objects a mapping of their fields. :func:`restore` writes a captured value back *into*
a freshly built object of the same shape: tensors with ``copy_``, optimisers with
``load_state_dict``, fields one by one. Restoring in place keeps the aliasing a fresh
build sets up — an optimiser that holds the model's parameters, a replica state whose
1-D tensors *are* the model's — which a plain unpickle would cut.
"""

from __future__ import annotations

import copy
import dataclasses
from collections import deque
from typing import Any

import numpy as np
import torch

from decent.core.tree import tree_map

OPTIMIZER, GENERATOR, OBJECT, DATACLASS, TENSOR = (
    "__optimizer__", "__generator__", "__object__", "__dataclass__", "__tensor__")


def _is_dataclass_instance(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def capture(value: Any) -> Any:
    """A picklable, CPU-resident copy of ``value`` that :func:`restore` understands."""
    # dicts, lists and tuples are walked by tree_map; a dataclass is a leaf checked
    # before them (as a whole: it becomes a mapping of its fields)
    return tree_map(_capture_leaf, value, is_leaf=_is_dataclass_instance)


def _capture_leaf(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return {TENSOR: value.detach().to("cpu", copy=True)}
    if isinstance(value, torch.optim.Optimizer):
        return {OPTIMIZER: capture(value.state_dict())}
    if isinstance(value, torch.Generator):
        return {GENERATOR: value.get_state()}
    if isinstance(value, torch.nn.Module):
        raise TypeError("a model inside a strategy's state cannot be checkpointed: keep "
                        "tensors or optimisers there")
    if _is_dataclass_instance(value):
        return {DATACLASS: (type(value), {f.name: capture(getattr(value, f.name))
                                          for f in dataclasses.fields(value)})}
    if isinstance(value, deque):
        return deque((capture(v) for v in value), maxlen=value.maxlen)
    if isinstance(value, (set, frozenset, np.ndarray, str, bytes, int, float, bool,
                          type(None))):
        return copy.deepcopy(value)
    if hasattr(value, "__dict__"):
        return {OBJECT: (type(value), {k: capture(v) for k, v in vars(value).items()})}
    return copy.deepcopy(value)


def _is(saved: Any, tag: str) -> bool:
    return isinstance(saved, dict) and len(saved) == 1 and tag in saved


def _is_tagged(saved: Any) -> bool:
    """A captured tensor, optimiser, generator, dataclass or object (not a plain dict)."""
    return any(_is(saved, tag) for tag in (TENSOR, OPTIMIZER, GENERATOR, DATACLASS, OBJECT))


@torch.no_grad()
def restore(fresh: Any, saved: Any, device: torch.device | str = "cpu") -> Any:
    """``saved`` (from :func:`capture`) written into ``fresh`` where shapes agree; the
    value to keep (``fresh`` itself when restored in place)."""
    # saved sets the shape; fresh is walked beside it (None wherever it has another
    # shape: a dict without the key, a sequence of another length)
    return tree_map(lambda s, f: _restore_leaf(f, s, device), saved, fresh,
                    is_leaf=_is_tagged)


def _restore_leaf(fresh: Any, saved: Any, device: torch.device | str) -> Any:
    if _is(saved, TENSOR):
        tensor = saved[TENSOR]
        if isinstance(fresh, torch.Tensor) and fresh.shape == tensor.shape \
                and fresh.dtype == tensor.dtype:
            fresh.copy_(tensor)
            return fresh
        return tensor.to(device)
    if _is(saved, OPTIMIZER):
        fresh.load_state_dict(restore(None, saved[OPTIMIZER], device))
        return fresh
    if _is(saved, GENERATOR):
        gen = fresh if isinstance(fresh, torch.Generator) else torch.Generator()
        gen.set_state(saved[GENERATOR])
        return gen
    if _is(saved, DATACLASS) or _is(saved, OBJECT):
        cls, fields = saved[DATACLASS] if DATACLASS in saved else saved[OBJECT]
        # into the fresh object when there is one (it may be aliased), else a new one;
        # object.__setattr__ also fills frozen dataclasses
        target = fresh if type(fresh) is cls else cls.__new__(cls)
        for name, value in fields.items():
            object.__setattr__(target, name, restore(getattr(target, name, None), value,
                                                     device))
        return target
    if isinstance(saved, deque):
        return deque((restore(None, v, device) for v in saved), maxlen=saved.maxlen)
    return saved
