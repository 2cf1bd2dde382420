"""A run that stops before its end: what it leaves behind, and the one line that says so.

**Ctrl-C** (``KeyboardInterrupt``) is not a failure: the run directory stays
``.<id>.partial``, where ``decent resume`` finds it, and ``interrupted.json`` in it
records the round reached. The runner closes the engine (Ray's actors, and the Ray it
started) and raises :class:`RunInterrupted`, whose line names the round and the exact
resume command. ``decent resume`` goes on from the last checkpoint; a run interrupted
before its first checkpoint runs again from round 0 in the same directory, as its line
said. A directory with no checkpoint and no such record (a run killed before its first
checkpoint) is refused as before: nothing says how it stopped.

**A strategy's own mistake** (:class:`~decent.core.errors.PhaseError`) breaks the run:
its directory becomes ``<id>.failed`` and the full traceback goes to ``error.log`` there,
for the one line on the terminal to point to."""

from __future__ import annotations

import contextlib
import shlex
import time
import traceback
from pathlib import Path

from decent.core.errors import PhaseError
from decent.engine.config import RunConfig
from decent.run import checkpoint
from decent.run.rundir import RunDir

MARK = "interrupted.json"
ERROR_LOG = "error.log"


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a run (or a sweep); ``line`` says where, and how to go on. A
    ``KeyboardInterrupt`` still, so that nothing that catches ``Exception`` stops it.
    ``after``: the Ctrl-C it stands for; if that one came while the cleanup after an
    earlier one ran, the cleanup was cut short (``cut_short``)."""

    def __init__(self, line: str, after: BaseException | None = None) -> None:
        super().__init__(line)
        self.line = line
        self.cut_short = after is not None and isinstance(after.__context__,
                                                          KeyboardInterrupt)


def interrupted(rd: RunDir, round_: int, cfg: RunConfig, after: BaseException
                ) -> RunInterrupted:
    """Record in ``rd`` (left as it is: resumable) that Ctrl-C (``after``) stopped it in
    round ``round_`` of ``cfg``'s; the exception that says so."""
    rounds = cfg.rounds
    resumes_at = checkpoint.pointer_or_empty(rd.path).get("next_round")
    with contextlib.suppress(OSError):  # a full disk must not hide the line
        rd.write_json(MARK, {"round": round_, "rounds": rounds, "resumes_at": resumes_at,
                             "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    then = ("no checkpoint yet: it runs again from round 0" if resumes_at is None
            else f"from its checkpoint at round {resumes_at}")
    return RunInterrupted(f"interrupted at round {round_} of {rounds}: resume with  "
                          f"{resume_command(rd.path, cfg)}  ({then})", after)


def before_start(cfg: RunConfig, resuming: Path | None = None) -> RunInterrupted:
    """Ctrl-C while the run started (data loading, Ray's start), before it wrote
    anything: no run directory, or the resumed one ``resuming`` as it was."""
    if resuming is None:
        return RunInterrupted("interrupted while the run started: no run directory was "
                              "written")
    return RunInterrupted(f"interrupted while the run started: {resuming} is unchanged; "
                          f"resume with  {resume_command(resuming, cfg)}")


def resume_command(path: Path, cfg: RunConfig) -> str:
    """The command that resumes ``path``. A run whose config imports code of its own
    resumes only with ``--trust-imports``: the user who ran it ran that code already."""
    trust = " --trust-imports" if cfg.imports else ""
    return f"decent resume {shlex.quote(str(path))}{trust}"


def from_round_zero(path: Path) -> bool:
    """Whether ``decent resume`` runs ``path`` again from round 0: Ctrl-C stopped it
    before its first checkpoint."""
    return ((path / MARK).is_file() and not (path / checkpoint.POINTER).is_file()
            and not checkpoint.found_rounds(path))


def resumed(rd: RunDir) -> None:
    """The resumed run has taken over: the record of the interruption is spent
    (``segments.json`` keeps each stretch of the run)."""
    (rd.path / MARK).unlink(missing_ok=True)


def log_error(run_dir: Path, exc: PhaseError) -> None:
    """Write ``exc``'s full traceback (where it happened: inside the actor on Ray) to
    ``run_dir/error.log`` and point ``exc.log`` at it; nothing if the folder is gone."""
    text = exc.trace or "".join(traceback.format_exception(exc))
    path = run_dir / ERROR_LOG
    try:
        path.write_text(f"{exc}\n\n{text.rstrip()}\n")
    except OSError:
        return
    exc.log = str(path)


def line_of(exc: BaseException) -> tuple[str, bool]:
    """The line for a ``KeyboardInterrupt`` the CLI caught, and whether the cleanup after
    a first Ctrl-C was cut short by another (the run's line is then in its context)."""
    seen: BaseException | None = exc
    while isinstance(seen, KeyboardInterrupt):
        if isinstance(seen, RunInterrupted):
            return seen.line, seen is not exc or seen.cut_short
        seen = seen.__context__
    return "interrupted", isinstance(exc.__context__, KeyboardInterrupt)
