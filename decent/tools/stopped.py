"""How the ``decent`` command ends when a run stops early: one line on stderr and an exit
code, never a traceback. What the line says is the run's to know
(:mod:`decent.run.stops`): here it is printed, and the process ends quietly.

- Ctrl-C: exit code 130 (128 + SIGINT, what a shell reports for a command it stopped).
- A strategy's own mistake (:class:`~decent.core.errors.StrategyError`): exit code 1, a
  run that failed; a bad value a user wrote is 2 (:func:`decent.tools.cli.main`)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

from decent.core.errors import StrategyError

EXIT_INTERRUPTED = 130
EXIT_FAILED = 1


@dataclass
class Said:
    """What this process has said of a Ctrl-C (one command per process)."""

    line: bool = False  # the line is out: a later Ctrl-C adds nothing
    cut_short: bool = False  # a second Ctrl-C cut the run's cleanup short


SAID = Said()


def said(exc: KeyboardInterrupt | StrategyError) -> int:
    """Print the line for ``exc`` (Ctrl-C, or a strategy's own mistake); the exit code."""
    return interrupted(exc) if isinstance(exc, KeyboardInterrupt) else strategy_failed(exc)


def interrupted(exc: KeyboardInterrupt) -> int:
    """Print the line for a Ctrl-C that stopped the command; its exit code."""
    from decent.run.stops import line_of

    line, cut_short = line_of(exc)
    SAID.cut_short = SAID.cut_short or cut_short
    print(line, file=sys.stderr, flush=True)
    SAID.line = True
    return EXIT_INTERRUPTED


def strategy_failed(exc: StrategyError) -> int:
    """Print a strategy's mistake in one line, with where its traceback went (a phase's
    error: the run directory's ``error.log``); its exit code."""
    log = getattr(exc, "log", None)
    print(f"error: {exc}" + (f" (traceback: {log})" if log else ""), file=sys.stderr)
    return EXIT_FAILED


def finish(main: Callable[[], int]) -> NoReturn:
    """``sys.exit(main())`` for the console script, quiet after Ctrl-C. Once the line is
    out, another Ctrl-C is ignored: Python's exit handlers (Ray's shutdown, W&B's) would
    print its traceback. Where a second Ctrl-C cut the run's cleanup short, the process
    ends without them: they would go on with what is half stopped, and the Ray a run
    started is taken down by its watchdog when this process ends."""
    try:
        code = main()
    except KeyboardInterrupt as exc:  # a Ctrl-C while main was saying another
        SAID.cut_short = True
        code = EXIT_INTERRUPTED if SAID.line else interrupted(exc)
    if code == EXIT_INTERRUPTED:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if SAID.cut_short:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    sys.exit(code)
