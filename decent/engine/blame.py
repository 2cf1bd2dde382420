"""A strategy's own mistake, said where it happened: the strategy, the phase, the client
and the round.

A phase is strategy code, run for one client at a time (:mod:`decent.engine.group`), in
this process or inside a Ray actor. An exception it raises — its own, or one the platform
raises on its behalf when a message or a state breaks the contract — is turned into a
:class:`~decent.core.errors.PhaseError` right there, while the client, the phase and the
round are known and the traceback is whole: on Ray the driver would otherwise see only a
``RayTaskError`` wrapping it, with no word of which client ran."""

from __future__ import annotations

import dataclasses
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from decent.core.errors import ConfigError, PhaseError, StrategyError


@contextmanager
def blame(strategy: str, phase: str, client: int, round_: int) -> Iterator[None]:
    """Run strategy code for ``client``; whatever it raises comes out as a
    :class:`PhaseError` naming where. A ``ConfigError`` passes as it is (a value the user
    wrote, said in its own line), and so does anything that is not an ``Exception``
    (Ctrl-C)."""
    try:
        yield
    except (ConfigError, PhaseError):
        raise
    except Exception as exc:
        raise PhaseError(strategy, phase, client, round_, describe(exc),
                         "".join(traceback.format_exception(exc))) from exc


def describe(exc: Exception) -> str:
    """``exc`` in one line: the platform's own contract messages as they are, anything
    else with its type (``KeyError: 'y'``), cut at its first line."""
    first = next((line for line in str(exc).splitlines() if line.strip()), "")
    if isinstance(exc, StrategyError):
        return first or type(exc).__name__
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def check_state(strategy: Any, state: Any) -> None:
    """Refuse a client state that is not the strategy's declared ``State``: checkpoints
    save and restore it field by field as that class, so a phase (or ``init_state``) that
    put anything else there would break the run later, far from the mistake. A strategy
    that declares no dataclass ``State`` is not checked."""
    declared = getattr(strategy, "State", None)
    if not (isinstance(declared, type) and dataclasses.is_dataclass(declared)):
        return
    if not isinstance(state, declared):
        raise StrategyError(f"client.state is a {type(state).__name__}, not a "
                            f"{declared.__name__} ({type(strategy).__name__}.State): "
                            "init_state must return one, and a phase must leave one there")
