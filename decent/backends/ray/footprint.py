"""The memory probe: one client's memory, computed from the shapes of the model built once,
and the one figure that cannot be computed, measured without a training step.

The probe builds the clients of two ids (the first and the last: a star's server and a
worker, or an aggregator and a worker) on the CPU, as an actor would build them, but runs
no phase of the run: a local phase would cost a probe of a GPU run minutes of CPU work
(five AdamW steps of SmolLM2 for a batched chunk padded to 16 clients took 199 s on a
2-core machine) to learn what shapes say exactly. What it reports:

- computed from shapes (the built tensors' bytes, no step run): the model (every parameter
  and buffer, once) and the frozen weights of it that actors can share; per client its
  private tensors (its trainable parameters — a LoRA run's adapters — its strategy state,
  SubCGE's buffers, its data shard), one gradient per trainable value, and the optimiser
  slots its first step will fill (SGD with momentum: 1 per trainable value, AdamW: 2); the
  task's shared data; its messages, taken as one copy of the trainable parameters per
  neighbour (a model-averaging payload: a compressed or seed payload is smaller), or as
  the strategy states them (``Strategy.traffic_bytes``: SeedFlood's flooded updates, with
  the seen seeds its state grows by within a round — O(n) a client);
- measured: one client's activations for one batch — the bytes autograd saves for the
  backward pass during one forward of ``strategy.batch_size`` examples (no backward, no
  optimiser step). Activations depend on the model's code, not only its shapes.

The clients are built for sequential execution: a batched group would stack them in a
chunk padded to the run's clients, which the plan computes instead (``plan_gpu_memory``).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import gc
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from decent.core.errors import ConfigError
from decent.engine.config import RunConfig
from decent.engine.plan import RunPlan

MB = 2**20


@dataclass(frozen=True)
class Footprint:
    """What the probe found, in MB (see the module docstring for what is computed and
    what is measured)."""

    model_mb: float  # every parameter and buffer, once
    frozen_mb: float  # of which the frozen weights one machine can share
    per_client_mb: float  # the largest probed client: private tensors, state, data
    data_mb: float  # the task's data every process holds
    message_mb: float = 0.0  # the most one probed client sends in a phase
    edge_mb: float = 0.0  # the largest payload one probed client sends one neighbour
    trainable_mb: float = 0.0  # one client's trainable parameters (a chunk row's)
    slots: int = 0  # optimiser state values per trainable value
    activation_mb: float = 0.0  # one client's activations for one batch (measured)


def reachable(obj: Any, seen: set[int] | None = None) -> Iterator[Any]:
    """``obj`` and every object reachable from it through dataclasses, containers, plain
    objects' attributes, optimisers (parameters and state) and modules (parameters, their
    gradients, buffers), once each."""
    seen = set() if seen is None else seen
    if id(obj) in seen or isinstance(obj, type):
        return
    seen.add(id(obj))
    yield obj
    if isinstance(obj, (torch.Tensor, np.ndarray)):
        return
    if isinstance(obj, torch.nn.Module):
        children: list[Any] = [*obj.buffers()]
        for p in obj.parameters():
            children += [p] if p.grad is None else [p, p.grad]
    elif isinstance(obj, torch.optim.Optimizer):
        children = [[g["params"] for g in obj.param_groups], obj.state]
    elif dataclasses.is_dataclass(obj):
        children = [getattr(obj, f.name) for f in dataclasses.fields(obj)]
    elif isinstance(obj, dict):
        children = list(obj.values())
    elif isinstance(obj, (list, tuple, set)):
        children = list(obj)
    elif hasattr(obj, "__dict__"):  # a plain object (SubCGE's estimator)
        children = [vars(obj)]
    else:
        return
    for child in children:
        yield from reachable(child, seen)


def tensors_in(obj: Any) -> Iterator[torch.Tensor]:
    """Every tensor reachable from ``obj`` (see :func:`reachable`), once each."""
    return (x for x in reachable(obj) if isinstance(x, torch.Tensor))


def storage_bytes(tensors: Iterator[torch.Tensor], exclude: set[int]) -> tuple[int, set[int]]:
    """Bytes of the distinct storages of ``tensors`` not in ``exclude`` (storage
    addresses), and the addresses counted."""
    counted: set[int] = set()
    total = 0
    for t in tensors:
        if t.device.type == "meta":
            continue
        ptr = t.untyped_storage().data_ptr()
        if ptr in exclude or ptr in counted or ptr == 0:
            continue
        counted.add(ptr)
        total += t.untyped_storage().nbytes()
    return total, counted


def optimiser_slots(opt: torch.optim.Optimizer) -> int:
    """State values per trainable value the optimiser fills at its first step (Adam's
    two moments, SGD's momentum buffer if it has momentum)."""
    name = type(opt).__name__.lower()
    if name.startswith("adam"):
        return 2
    return 1 if opt.defaults.get("momentum", 0) else 0


def trainable_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def probe_line(cfg: RunConfig) -> str:
    """The line printed before the probe starts: what it builds, computes and measures."""
    model = cfg.model.name + (f" {cfg.model.path}" if getattr(cfg.model, "path", None) else "")
    ids = " and ".join(map(str, sorted({0, cfg.n - 1})))
    return (f"planning memory: probing clients {ids} of {model} on the CPU (computed from "
            "shapes: parameters, gradients, optimiser slots, adapters, frozen weights, "
            "data, messages; measured: one batch's activations in one forward; no training "
            "step)…")


def activation_bytes(group: Any, cids: list[int], batch_size: int) -> int:
    """One batch's activations (:func:`decent.engine.stacking.activation_bytes`) of the
    first probed client with data."""
    from decent.engine.stacking import activation_bytes as measured

    client = next((group.clients[c] for c in cids if group.clients[c].data is not None), None)
    return measured(client, group.task, batch_size)


def probe(cfg: RunConfig, plan: RunPlan) -> Footprint:
    """Build the first and the last client as an actor would (on the CPU, sequentially:
    no chunk), compute their memory from shapes, measure one batch's activations, free.
    Runs no phase and no optimiser step."""
    from decent.engine.batched import batching_problem
    from decent.engine.group import ClientGroup

    cids = sorted({0, cfg.n - 1})
    sequential = dataclasses.replace(cfg, execution=dataclasses.replace(
        cfg.execution, mode="sequential"))
    group = ClientGroup(sequential, cids, torch.device("cpu"), plan)
    try:
        if cfg.execution.mode == "batched":  # the actors would refuse it: say so now
            problem = batching_problem(group.strategy, group.base_model)
            if problem is not None:
                raise ConfigError("execution.mode", f"batched: {problem}; use auto (falls "
                                  "back to sequential) or sequential")
        base = {t.untyped_storage().data_ptr() for t in tensors_in(group.base_model)}
        base.update(t.untyped_storage().data_ptr()
                    for t in group.strategy.shared_tensors(group.shared).tensors)
        model, _ = storage_bytes(tensors_in(group.base_model), set())
        frozen, _ = storage_bytes(iter(group.shareable().values()), set())
        shared, _ = storage_bytes(tensors_in(group.shared), base)
        # the task's tensors (a client's shard may be a view of them: counted here once)
        # and arrays
        task, task_ptrs = storage_bytes(tensors_in(vars(group.task)), base)
        task += sum(x.nbytes for x in reachable(vars(group.task))
                    if isinstance(x, np.ndarray))
        graph = plan.topology.round_graph(0)
        per_client = trainable = sent = 0
        slots = 0
        for cid in cids:
            client = group.clients[cid]
            own, _ = storage_bytes(tensors_in([client.model, client.state, client.data]),
                                   base | task_ptrs)
            grads = sum(p.numel() * p.element_size() for p in client.model.parameters()
                        if p.requires_grad and p.grad is None)
            # the optimiser slots its first step fills (none is filled: no step ran)
            opts = [o for o in reachable(client.state) if isinstance(o, torch.optim.Optimizer)]
            filled = sum(optimiser_slots(o) * sum(p.numel() * p.element_size()
                                                  for g in o.param_groups for p in g["params"])
                         for o in opts if not o.state)
            slots = max([slots, *map(optimiser_slots, opts)])
            # its inbox is counted per actor, from the graph (plan_memory); the payloads it
            # sends wait in the object store, counted with the node
            size = trainable_bytes(client.model)
            grows, sends = group.strategy.traffic_bytes(cid, graph.degree(cid), size)
            per_client = max(per_client, own + grads + filled + grows)
            trainable = max(trainable, size)
            sent = max(sent, sends)
        batch_size = int(getattr(cfg.strategy, "batch_size", 0) or 0)
        activations = activation_bytes(group, cids, batch_size)
        data = task + shared
    finally:
        del group
        gc.collect()
        release_freed_memory()
    return Footprint(model / MB, frozen / MB, per_client / MB, data / MB, sent / MB,
                     trainable / MB, trainable / MB, slots, activations / MB)


def release_freed_memory() -> None:
    """Hand the heap that freed tensors leave behind back to the system (glibc keeps it
    otherwise: the driver would carry the probe's model for the whole run)."""
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to do
        ctypes.CDLL("libc.so.6").malloc_trim(0)
