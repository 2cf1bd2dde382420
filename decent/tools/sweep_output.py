"""What ``decent sweep`` prints in place of Ray Tune's progress tables.

One line per trial as it ends, named by the grid keys that vary and its seed::

    strategy.lr=0.1 seed=1: gmp_accuracy 0.934, 4.1 s
    strategy.lr=0.05 seed=0: failed (see runs/t-sweep/tune/trials/lr0.05-seed0_…/error.txt)

and, once the sweep is over, one aligned table of every trial (those an earlier call
finished too). The metric is ``--metric``, else the config's ``eval.target.metric``, else
the task's first metric of the averaged model (``gmp_accuracy``, ``gmp_loss``); the time is
the run's own wall time, the one ``decent run`` prints.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from decent.core.errors import ConfigError
from decent.engine.config import RunConfig

# summary numbers every run has besides the evaluated metrics: a sweep may compare costs
COSTS = ("final_loss", "bytes_total", "max_edge_bytes_total", "sim_time_total_s", "wall_s",
         "time_to_target_s")
NEW_OUTPUT = "RAY_AIR_NEW_OUTPUT"  # Tune's switch between its two console output engines
ERROR_FILE = "error.txt"  # where Tune leaves a failed trial's traceback, in its trial folder


def sweep_metric(cfg: RunConfig, metric: str | None) -> str:
    """The metric the trial lines and the table show (checked: one line if no run of this
    task reports it)."""
    from decent.engine.evaluation import evaluated_metrics
    from decent.tasks.registry import TASKS

    task_metrics = TASKS.entry(cfg.task.name).build.METRICS
    chosen = metric or cfg.eval.target.metric or f"gmp_{task_metrics[0]}"
    if chosen == "loss":  # a round's training loss: the summary keeps the last one
        chosen = "final_loss"
    known = [m for m in evaluated_metrics(task_metrics, cfg.eval.per_client) if m != "loss"]
    known += COSTS
    if chosen not in known:
        raise ConfigError("--metric", f"{chosen!r} is not in a run's summary of task "
                          f"'{cfg.task.name}'; choose one of: {', '.join(known)}")
    return chosen


def varying_keys(grid: dict[str, list[Any]]) -> list[str]:
    """The grid keys with more than one value, in the order trial names use (sorted)."""
    return sorted(k for k, values in grid.items() if len(values) > 1)


def chosen_values(overrides: Sequence[str]) -> dict[str, str]:
    """A trial's overrides as {key: value}: the grid's values and the seed come after the
    command line's, so the last of a key is the one the trial ran with."""
    return {key: value for key, _, value in (item.partition("=") for item in overrides)}


def trial_label(overrides: Sequence[str], keys: Sequence[str]) -> str:
    values = chosen_values(overrides)
    return " ".join([*(f"{k}={values[k]}" for k in keys), f"seed={values['seed']}"])


def number(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) else "—"


def seconds(value: Any) -> str:
    """A wall time: tenths from a second up, as ``decent run`` prints it; two significant
    digits below (a tiny trial's 0.031 s is not 0.0 s)."""
    if not isinstance(value, (int, float)):
        return "—"
    return f"{value:.1f} s" if value >= 1 else f"{value:.2g} s"


def done_line(label: str, metric: str, result: dict[str, Any]) -> str:
    return f"{label}: {metric} {number(result.get(metric))}, {seconds(result.get('wall_s'))}"


def failed_line(label: str, where: str) -> str:
    return f"{label}: failed (see {where})"


def error_log(trial_dir: str | None) -> str:
    """Where a failed trial's traceback is: its Tune trial folder's error file."""
    return str(Path(trial_dir) / ERROR_FILE) if trial_dir else "the Tune log"


def line_printer(labels: dict[str, str], metric: str, emit: Callable[[str], None]) -> Any:
    """A Tune callback that emits one line per trial as it ends; ``labels`` maps a trial's
    key (its run name) to what the line calls it."""
    from ray import tune

    def label(trial: Any) -> str:
        return labels[trial.config["config"]["name"]]

    class TrialLines(tune.Callback):
        def on_trial_complete(self, iteration: int, trials: list, trial: Any,
                              **info: Any) -> None:
            emit(done_line(label(trial), metric, trial.last_result or {}))

        def on_trial_error(self, iteration: int, trials: list, trial: Any,
                           **info: Any) -> None:
            emit(failed_line(label(trial), error_log(trial.path)))

    return TrialLines()


@contextlib.contextmanager
def tune_console(verbose: bool) -> Iterator[None]:
    """Ray Tune's console output and the driver's Ray log, as asked. Quiet: Tune's older
    output engine (``RAY_AIR_NEW_OUTPUT=0``, Tune's own switch), which at ``verbose=0``
    prints nothing, where the newer one still prints its banner and every failed trial's
    result table; and the ``ray`` logger at WARNING ("Wrote the latest version of all
    result files ..."). Both are put back afterwards."""
    log = logging.getLogger("ray")
    level, switch = log.level, os.environ.get(NEW_OUTPUT)
    if not verbose:
        log.setLevel(logging.WARNING)
        os.environ[NEW_OUTPUT] = "0"
    try:
        yield
    finally:
        log.setLevel(level)
        if switch is None:
            os.environ.pop(NEW_OUTPUT, None)
        else:
            os.environ[NEW_OUTPUT] = switch


def closing_table(index: dict[str, Any]) -> list[str]:
    """Every trial of the sweep: the varying keys, seed, status, final metric and wall
    time, in plain text, columns aligned (numbers to the right)."""
    keys = varying_keys(index["grid"])
    metric = index["metric"]
    header = [*keys, "seed", "status", f"final {metric}", "wall time"]
    rows = []
    for entry in index["trials"]:
        values = chosen_values(entry["overrides"])
        summary = read_summary(entry.get("run_dir")) if entry["status"] == "done" else {}
        rows.append([*(values[k] for k in keys), values["seed"], entry["status"],
                     number(summary.get(metric)), seconds(summary.get("wall_s"))])
    widths = [max(len(row[c]) for row in [header, *rows]) for c in range(len(header))]
    right = {len(header) - 2, len(header) - 1}

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    return [line(header), *(line(row) for row in rows)]


def read_summary(run_dir: str | None) -> dict[str, Any]:
    path = Path(run_dir or "") / "summary.json"
    return json.loads(path.read_text()) if run_dir and path.is_file() else {}


def closing_lines(index: dict[str, Any]) -> list[str]:
    """The table, then the counts and the sweep directory."""
    counts: dict[str, int] = {}
    for trial in index["trials"]:
        counts[trial["status"]] = counts.get(trial["status"], 0) + 1
    return [*closing_table(index),
            f"sweep: {len(index['trials'])} trials, "
            + ", ".join(f"{n} {status}" for status, n in sorted(counts.items())),
            f"sweep directory: {index['dir']}"]
