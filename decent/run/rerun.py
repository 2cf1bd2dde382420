"""``decent verify --rerun RUN_DIR``: a record's saved config run again, its first K rounds,
and every metric row compared with the record's (:mod:`decent.run.row_diff`).

The config is the record's own, all its rounds included, and only the first K are run:
shortening ``rounds`` would change what is derived from it (the lr schedule's length, the
churn plan, the rounds evaluated last), so the rows would not be the record's prefix. The
run writes nothing into the record; what it needs on disk goes to a temporary folder that
is removed after."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from decent.core.errors import ActorLost, ConfigError
from decent.engine.config import RunConfig, from_dict, to_dict
from decent.engine.group import resolve_device
from decent.run import checkpoint, environment
from decent.run.row_diff import HOST_FIELDS, MEASURED_FIELDS, Comparison
from decent.run.rundir import Segments
from decent.run.tolerance import find as measured_tolerance

# the kernel sets ATEN_CPU_CAPABILITY names, by architecture
KERNEL_SETS = ("default", "avx2", "avx512", "sve256", "vsx", "zvector")


def kernels_wanted(run_dir: str | Path, cpu_kernels: str | None = None) -> str | None:
    """The CPU kernels a re-run of ``run_dir`` should use: ``cpu_kernels`` when given,
    else those the record was made with, else None (this process's own)."""
    if cpu_kernels is not None:
        if cpu_kernels not in KERNEL_SETS:
            raise ConfigError("--cpu-kernels", f"must be one of {', '.join(KERNEL_SETS)} "
                              f"(got {cpu_kernels!r})")
        return cpu_kernels
    recorded = environment.recorded_kernels(recorded_segments(Path(run_dir).expanduser()))
    if recorded is not None and recorded not in KERNEL_SETS:
        # a record names the kernels a new process is told to use: only torch's own names
        raise ConfigError("run_dir", f"{Segments.FILE} records CPU kernels {recorded!r}, not "
                          f"one of {', '.join(KERNEL_SETS)}; give --cpu-kernels")
    return recorded


def command_line(run_dir: str | Path, kernels: str, rounds: int | None = None,
                 tolerance: float | None = None, backend: str | None = None,
                 device: str | None = None, trust_imports: bool = False,
                 threads: int | None = None) -> list[str]:
    """The ``decent verify --rerun`` arguments that re-run ``run_dir`` with ``kernels``
    (in the process the CLI starts with them)."""
    argv = ["verify", str(run_dir), "--rerun", "--cpu-kernels", kernels]
    for flag, value in (("--rounds", rounds), ("--tolerance", tolerance),
                        ("--backend", backend), ("--device", device), ("--threads", threads)):
        if value is not None:
            argv += [flag, str(value)]
    return argv + (["--trust-imports"] if trust_imports else [])


def recorded_segments(path: Path) -> list[dict[str, Any]]:
    """The record's ``segments.json`` (empty for a record made before it was kept)."""
    try:
        segments = json.loads((path / Segments.FILE).read_text())
    except (OSError, ValueError):
        return []
    return segments if isinstance(segments, list) else []


def rerun(run_dir: str | Path, rounds: int | None = None, tolerance: float | None = None,
          backend: str | None = None, trust_imports: bool = False,
          device: str | None = None, cpu_kernels: str | None = None,
          threads: int | None = None) -> Comparison:
    """Run the record in ``run_dir`` again for its first ``rounds`` rounds (default: every
    round it recorded), on its own backend and device or ``backend`` and ``device``, with
    its own thread count or ``threads``, and compare the rows; every bad input is one
    line (``ConfigError``) before anything runs. Every value is compared exactly where
    the record's fingerprint is this re-run's; elsewhere (another machine, thread count or
    kernels, or a record that keeps no whole fingerprint) integers and the clock exactly
    and floats within the record's measured tolerance (:func:`decent.run.tolerance.find`),
    or ``tolerance`` where given. The CPU kernels (``cpu_kernels``, default the record's)
    must be this process's: torch picks them once per process, so ``decent verify
    --rerun`` starts a process with them where they differ (:func:`kernels_wanted`)."""
    from decent.engine.saved import load_saved_config

    path = Path(run_dir).expanduser()
    if not path.is_dir():
        raise ConfigError("run_dir", f"{path} is not a directory")
    if not (path / "config.yaml").is_file():
        raise ConfigError("run_dir", f"{path} is not a run directory (no config.yaml)")
    wanted, recorded_k = kernels_wanted(path, cpu_kernels), kernels_wanted(path)
    own = environment.cpu_kernels()
    if wanted is not None and wanted != own:
        told = os.environ.get(environment.KERNELS_VARIABLE)
        raise ConfigError("--cpu-kernels", f"this CPU cannot run {wanted} kernels (torch "
                          f"runs {own} here)" if told == wanted else
                          f"this process runs {own} kernels, not {wanted}: start it with "
                          f"{environment.KERNELS_VARIABLE}={wanted} (decent verify --rerun "
                          "does)")
    if tolerance is not None and not tolerance >= 0:
        raise ConfigError("--tolerance", f"must be a number ≥ 0 (got {tolerance})")
    if threads is not None and threads < 1:
        raise ConfigError("--threads", f"must be a whole number ≥ 1 (got {threads})")
    recorded = recorded_rows(path)
    k = len(recorded) if rounds is None else rounds
    if not 1 <= k <= len(recorded):
        raise ConfigError("--rounds", f"must be between 1 and {len(recorded)}, the rounds "
                          f"{path / checkpoint.METRICS} records (got {k})")
    cfg = load_saved_config(path / "config.yaml", trust_imports)
    say_absent_data(cfg)
    kept_initial = recorded_initial(path) if cfg.eval.initial else None
    excluded = set(HOST_FIELDS)
    threads_before = torch.get_num_threads()
    with tempfile.TemporaryDirectory(prefix="decent-rerun-") as scratch:
        again = for_rerun(cfg, Path(scratch), backend, device, threads)
        used, said = tolerance_for(path, again, tolerance)
        found = Comparison(rounds=k, tolerance=used)
        found.notes.append(said)
        if cfg.compute.mode == "measured":
            excluded |= set(MEASURED_FIELDS)
            found.notes.append("compute.mode=measured, not compared: "
                               f"{', '.join(MEASURED_FIELDS)}")
        try:
            initial, rows = replay(again, k)
        finally:  # a client group sets the run's thread count in this process
            torch.set_num_threads(threads_before)
    if kept_initial is not None:
        found.add_rows("initial", kept_initial, initial, excluded)
    for r in range(k):
        found.add_rows(r, recorded[r], rows[r], excluded)
    found.notes.append(kernels_note(own, recorded_k, bool(found.mismatches)))
    return found


def kernels_note(own: str, recorded: str | None, differs: bool) -> str:
    """Which CPU kernels the re-run used, and, where the record does not say which made
    it and the rows differ, how to try others."""
    if recorded is None and differs:
        return (f"ran with {own} CPU kernels; the record does not say which made it, and a "
                "record made on another CPU reproduces only to the last bits: "
                "--cpu-kernels avx2 (or avx512, default) runs it with others")
    return f"ran with {own} CPU kernels" + (" as the record was made" if recorded == own
                                             else "")


def recorded_rows(path: Path) -> list[dict[str, Any]]:
    """The record's rows, one per round from round 0 (an evaluation every E rounds adds
    its fields to every E-th row; a resumed run's rows are those of the run that never
    stopped). A line cut short by a kill is not a row."""
    metrics = path / checkpoint.METRICS
    if not metrics.is_file():
        raise ConfigError("run_dir", f"{path} is not a run directory (no {checkpoint.METRICS})")
    rows: list[dict[str, Any]] = []
    for k, line in enumerate(checkpoint.whole_rows(metrics)):
        try:
            row = json.loads(line)
        except ValueError:
            raise ConfigError("run_dir", f"{metrics}: line {k + 1} is not a JSON row") from None
        if not isinstance(row, dict) or row.get("round") != k:
            raise ConfigError("run_dir", f"{metrics}: line {k + 1} is not the row of round {k}")
        rows.append(row)
    if not rows:
        raise ConfigError("run_dir", f"{metrics} records no round")
    return rows


def recorded_initial(path: Path) -> dict[str, Any] | None:
    """The starting model's metrics the record kept (``eval.initial``), if it kept them."""
    kept = path / "initial.json"
    if not kept.is_file():
        return None
    try:
        metrics = json.loads(kept.read_text())
    except ValueError:
        raise ConfigError("run_dir", f"{kept} is not a JSON object") from None
    if not isinstance(metrics, dict):
        raise ConfigError("run_dir", f"{kept} is not a JSON object")
    return metrics


def say_absent_data(cfg: RunConfig) -> None:
    """One line when a file or folder the record read is not on this machine (a shared
    data folder, a network table): the run would fail later, or go to the network."""
    wanted = [(f"task.{key}", getattr(cfg.task, key, None)) for key in ("data_dir", "paths")]
    wanted += [(f"network.{key}", getattr(cfg.network, key, None))
               for key in ("links_csv", "nodes_csv")]
    for name, value in wanted:
        for item in value if isinstance(value, list | tuple) else [value]:
            if item and not Path(str(item)).expanduser().exists():
                raise ConfigError(name, f"{item} is not on this machine (a relative path is "
                                  "read from the current folder); the record needs it to "
                                  "run again")


def for_rerun(cfg: RunConfig, scratch: Path, backend: str | None,
              device: str | None = None, threads: int | None = None) -> RunConfig:
    """The record's config as it ran, but writing only into ``scratch`` (no W&B run, no
    progress bar) and, given ``backend``, ``device`` or ``threads``, on that backend or
    device or with that many intra-op threads (a record saved ``device: auto``, which
    picks a GPU where there is one: a record made on a CPU reruns as it was made with
    ``device="cpu"``)."""
    data = to_dict(cfg)
    data["tracking"].update(out_dir=str(scratch / "runs"), progress=False)
    data["tracking"]["wandb"]["mode"] = "disabled"
    for key, value in (("backend", backend), ("device", device), ("torch_threads", threads)):
        if value is not None:
            data[key] = value
    return from_dict(data)


def tolerance_for(path: Path, cfg: RunConfig, given: float | None) -> tuple[float, str]:
    """The tolerance the re-run of ``path`` as ``cfg`` holds its floats to, and the line
    that says why: ``given``; else 0 where the record's fingerprint is this re-run's; else
    the record's measured tolerance, naming the fingerprint fields that differ."""
    if given is not None:
        return given, f"floats within {given:g} (--tolerance); integers and the clock exactly"
    recorded = environment.recorded_fingerprint(recorded_segments(path))
    now = environment.describe(cfg.torch_threads, resolve_device(cfg).type)
    if recorded is not None and not environment.differing(recorded, now):
        return 0.0, "fingerprint matches the record's: every value exactly"
    found = measured_tolerance(path)
    why = ("the record keeps no whole fingerprint (made before it was kept)"
           if recorded is None else "fingerprint differs: " + ", ".join(
               f"{key} ({shown(recorded[key])} here {shown(now[key])})"
               for key in environment.differing(recorded, now)))
    return found.value, f"{why}; integers and the clock exactly, {found.says()}"


def shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def replay(cfg: RunConfig, rounds: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The starting model's metrics (with ``eval.initial``: evaluating it is part of the
    run) and the rows of rounds 0 .. ``rounds`` - 1, made as the runner makes them and
    read back as the runner's JSON lines are. A lost actor starts the rounds again from
    the start (a record's rows are those of a run that never stopped)."""
    from decent.run.runner import Rounds, check

    driver = Rounds(cfg, check(cfg), None)
    try:
        while True:
            assert driver.slot is not None
            engine = driver.slot.engine
            try:
                initial = (engine.evaluate(cfg.eval.per_client, engine.present(0))
                           if cfg.eval.initial else {})
                rows: list[dict[str, Any]] = []
                for r in range(rounds):
                    rows.append(driver.round(r, rows))
            except ActorLost as lost:
                driver.count_restart(str(lost), "running the rounds again from the start")
                driver.slot.close()
                driver.slot.engine = driver.build()
                continue
            return as_written(initial), [as_written(row) for row in rows]
    finally:
        driver.close()


def as_written(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` as metrics.jsonl holds it (the record is compared with what it wrote)."""
    return json.loads(json.dumps(row, sort_keys=True))
