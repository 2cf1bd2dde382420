"""``execution.compile``: a chunk's stacked gradient step captured once and replayed.

A chunk of first-order clients whose model is stepped by ``vmap`` (the MLP and CNN
families) runs the same shapes every step: its batch is gathered from shards stacked to
a fixed ``[width, batch, …]`` (:meth:`decent.engine.stacked.ChunkStack._batch`). That
computation is handed to ``torch.compile`` once: on a GPU in its ``reduce-overhead`` mode
(CUDA graphs: one launch replays the whole step), on a CPU in its default mode (fused
kernels). Where a chunk's shapes change from step to step (a LoRA chunk cuts its
sequences to each batch's longest) or where the work is not one traced function (the
hooked zeroth-order forwards), the chunk runs eagerly and says so in one line; so does a
step the compiler cannot take (no C++ compiler, an unsupported operation).

Compiled kernels fuse and reorder floating-point work, so a compiled run agrees with an
eager one within rounding, not to the bit (the tolerance is measured in the tests).
Measured on a CPU it does not pay (``benchmarks/results/static_shapes.txt``), which is
why it is off unless asked for.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch

# torch.compile's backend; a test may swap it for a cheaper one that traces the same way
BACKEND = "inductor"
_said: set[str] = set()


def say_once(reason: str) -> None:
    """One line on stderr per reason and process: why a chunk runs eagerly."""
    if reason not in _said:
        _said.add(reason)
        print(f"execution.compile: {reason}; running eagerly", file=sys.stderr)


def root_cause(exc: BaseException) -> str:
    """The first line of the error at the bottom of ``exc``'s chain (the compiler wraps
    its backend's, as its ``inner_exception`` or context), with its type."""
    while True:
        inner = getattr(exc, "inner_exception", None) or exc.__cause__ or exc.__context__
        if not isinstance(inner, BaseException):
            break
        exc = inner
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first}"[:200]


class Captured:
    """``eager`` compiled on first call (``reduce-overhead`` on a GPU), and eager from
    then on if the compiler refuses it. The function must be pure (no state it changes,
    no draws), so a failed compiled call can be made again eagerly."""

    def __init__(self, eager: Callable[..., Any], on_gpu: bool) -> None:
        self.eager = eager
        self.on_gpu = on_gpu
        mode = "reduce-overhead" if on_gpu else None
        self.compiled: Callable[..., Any] | None = torch.compile(
            eager, backend=BACKEND, mode=mode, dynamic=False, fullgraph=True)

    def __call__(self, *args: Any) -> Any:
        if self.compiled is not None:
            try:
                if self.on_gpu:
                    # a CUDA graph's outputs live until the next replay: each step's
                    # results are read before the next step begins
                    torch.compiler.cudagraph_mark_step_begin()
                return self.compiled(*args)
            except Exception as exc:  # the compiler's own errors have no common base
                say_once(f"the chunk's step could not be compiled ({root_cause(exc)})")
                self.compiled = None
        return self.eager(*args)
