"""How a process runs its clients: the ``execution`` section, and what it refuses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from decent.core.errors import ConfigError
from decent.core.schema import at_least, one_of

EXECUTION_MODES = ("sequential", "batched", "auto")


@dataclass
class ExecutionConfig:
    """How a process runs its clients' local steps: one client after another
    (``sequential``), or the clients of a process stacked along a client axis and stepped
    as one computation (``batched``; ``auto``: batched where the strategy and the model
    allow it, else sequential). ``chunk``: the width of one stacked computation; a
    process's last, partial chunk is padded to it (to the run's client count where that is
    smaller), so a client's arithmetic, and its results, do not depend on how clients are
    grouped into processes."""

    # sequential: clients one after another; batched: a chunk of clients as one stacked
    # computation (refused where it cannot be exact); auto: batched where supported and
    # measured faster; unset: auto on a GPU, sequential on a CPU
    mode: str | None = one_of(EXECUTION_MODES, None, nullable=True)
    chunk: int = at_least(1, 256)  # batched: at most this many clients stacked in one computation
    # batched: capture a chunk's gradient step with torch.compile where its shapes are
    # fixed (CUDA graphs on a GPU); agrees with eager within rounding, not to the bit;
    # where it cannot, one line says why and the chunk runs eagerly
    compile: bool = False


def check_execution(cfg: Any, strategy: Any) -> None:
    """``execution.mode: batched`` for a run whose local steps cannot be stacked is
    refused here, in one line (``auto`` runs it sequentially); what only the built model
    shows (a dropout, batch norm) is refused when the clients are built
    (:mod:`decent.engine.stacking` decides both)."""
    from decent.engine.stacking import static_problem

    if cfg.execution.compile and cfg.execution.mode == "sequential":
        raise ConfigError("execution.compile", "compiles a batched chunk's step; set "
                          "execution.mode=batched (or auto), or leave compile false")
    if cfg.execution.mode != "batched":
        return
    problem = static_problem(cfg, strategy)
    if problem is not None:
        raise ConfigError("execution.mode", f"batched: {problem}; use auto (falls back to "
                          "sequential) or sequential")
