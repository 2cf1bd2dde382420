"""Whether, and how wide, a run's clients stack: the one decision, made in one place.

It is asked three times with what is known by then — when the config is loaded (the
strategy and its config: :func:`static_problem`, a ``batched`` run that cannot stack is
refused in one line), when a process builds its clients (the model too: :func:`decide`),
and by ``auto`` (the device: on a GPU every run that can stack does, on a CPU the measured
choices of :func:`~decent.engine.batched.slower_batched` keep arithmetic-bound models
sequential). ``execution.mode`` unset means ``auto`` on a GPU and ``sequential`` on a CPU:
a user who only sets ``device=cuda`` gets the fast path, and CPU runs keep the exact
sequential arithmetic of their committed records.

On a GPU under ``auto`` the chunk is sized from device memory: the free memory, less a
margin, over one client's training footprint in a chunk (its activations for one batch,
its gradient and optimiser slots), never above ``execution.chunk``: an out-of-memory error
the run could have foreseen is not left to the first step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from decent.core.errors import ConfigError
from decent.engine.batched import Batcher, batching_problem, slower_batched
from decent.engine.capture import say_once

# the share of a GPU's free memory a chunk may take (the rest: the allocator's cache,
# fragmentation, the evaluation's own batches)
GPU_CHUNK_SHARE = 0.8


@dataclass(frozen=True)
class Stacking:
    """What a process does with its clients' steps: stacked in chunks of ``chunk``, or one
    after another (``chunk`` 1) for ``reason``."""

    batched: bool
    chunk: int
    reason: str | None = None


def on_cuda(cfg: Any) -> bool:
    """Whether the run's clients compute on a GPU."""
    if cfg.device == "cuda":
        return True
    return cfg.device == "auto" and torch.cuda.is_available()


def mode_of(cfg: Any) -> str:
    """``execution.mode`` as the run takes it: unset is ``auto`` on a GPU, ``sequential``
    on a CPU."""
    mode = cfg.execution.mode
    if mode is None:
        return "auto" if on_cuda(cfg) else "sequential"
    return str(mode)


def static_problem(cfg: Any, strategy: Any) -> str | None:
    """Why this config's clients cannot stack, from the config alone (None: they may)."""
    if not getattr(strategy, "batchable", False):
        note = getattr(strategy, "batch_note", "")
        return (f"strategy '{cfg.strategy.name}' has no stacked local steps"
                + (f" ({note})" if note else ""))
    router = getattr(cfg.strategy, "router_loss", None)
    if (router is not None and router.active) or getattr(cfg.strategy, "logit_z_loss", 0) > 0:
        return "the router and logit z-loss terms are taken one client at a time"
    if cfg.task.name == "record":
        return "ReCoRD's candidates are scored one client at a time"
    return None


def decide(cfg: Any, strategy: Any, model: torch.nn.Module, n: int,
           per_client_mb: float | None = None) -> Stacking:
    """The decision for a process whose clients are built (``model``: the base model they
    copy; ``per_client_mb``: one client's footprint in a chunk, when measured)."""
    mode = mode_of(cfg)
    if mode == "sequential":
        return Stacking(False, 1, "execution.mode is sequential")
    problem = static_problem(cfg, strategy) or batching_problem(strategy, model)
    if problem is None and mode == "auto" and not on_cuda(cfg):
        problem = cpu_slower(strategy, model)
    if problem is not None:
        return Stacking(False, 1, problem)
    chunk = min(cfg.execution.chunk, n)
    if mode == "auto" and on_cuda(cfg) and per_client_mb:
        chunk = min(chunk, gpu_chunk(per_client_mb))
    return Stacking(True, chunk)


def cpu_slower(strategy: Any, model: torch.nn.Module) -> str | None:
    """Why ``auto`` keeps a run sequential on a CPU, where stacking measured slower (None:
    it batches). Zeroth-order estimates are forward passes only: SubCGE's stacked ±ε
    forwards measured 1.7× the sequential speed (16 tiny-Llama clients, 0.080 against
    0.135 s per iteration), dense MeZO's vmapped ones on the MLP 0.6–0.8×."""
    zo = getattr(strategy, "zo_estimator", None)
    if zo == "subcge":
        return None
    if zo is not None:
        return "dense MeZO's vmapped estimates run slower than one client at a time on a CPU"
    if slower_batched(model):
        return ("a convolutional or transformers model steps faster one client at a time "
                "on a CPU (measured: benchmarks/batched_clients.py)")
    return None


def gpu_chunk(per_client_mb: float) -> int:
    """The widest chunk one GPU's free memory holds (at least 1)."""
    free, _ = torch.cuda.mem_get_info()
    return max(1, math.floor(GPU_CHUNK_SHARE * free / 2**20 / per_client_mb))


def activation_bytes(client: Any, task: Any, batch_size: int) -> int:
    """Bytes autograd saves for the backward pass in one forward of ``batch_size`` of
    ``client``'s examples (its activations; the parameters it saves are not counted: they
    are the model's). 0 without data or a batch size."""
    if client is None or client.data is None or batch_size <= 0:
        return 0
    model = client.model
    held = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    sizes: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in held and ptr != 0:
            sizes[ptr] = t.untyped_storage().nbytes()
        return t

    batch = client.data.sample(batch_size, torch.Generator().manual_seed(0))
    was_training = model.training
    model.train()  # dropout's masks are saved too
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = task.loss(model, batch)
    model.train(was_training)
    del loss, batch
    return sum(sizes.values())


def chunk_row_mb(client: Any, task: Any, batch_size: int, slots: int) -> float:
    """One client's footprint as a row of a chunk, in MB: its activations for one batch,
    and its trainable tensors' gradient and ``slots`` optimiser slots."""
    trainable = sum(p.numel() * p.element_size() for p in client.model.parameters()
                    if p.requires_grad)
    return (activation_bytes(client, task, batch_size) + (1 + slots) * trainable) / 2**20


def make_batcher(cfg: Any, strategy: Any, model: torch.nn.Module,
                 clients: dict[int, Any], task: Any = None) -> Any:
    """The process's batcher, or None for sequential execution (``sequential``, or
    ``auto`` where the run cannot stack; ``batched`` then refuses in one line)."""
    holders = set(strategy.data_holders())
    trainers = [clients[c] for c in sorted(clients) if c in holders]
    row_mb = None
    if mode_of(cfg) == "auto" and on_cuda(cfg) and trainers and task is not None:
        slots = 2 if getattr(cfg.strategy, "optimizer", "sgd") == "adamw" else 1
        row_mb = chunk_row_mb(trainers[0], task, cfg.strategy.examples_per_step(), slots)
    decision = decide(cfg, strategy, model, cfg.n, row_mb)
    compiled = cfg.execution.compile
    if not decision.batched:
        if mode_of(cfg) == "batched":
            raise ConfigError("execution.mode", f"batched: {decision.reason}; use auto "
                              "(falls back to sequential) or sequential")
        if compiled:
            say_once(f"the clients run one after another ({decision.reason})")
        return None
    return Batcher(trainers, decision.chunk, compiled) if trainers else None
