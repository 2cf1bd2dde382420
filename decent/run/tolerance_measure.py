"""``decent verify --rerun RUN_DIR --measure-tolerance``: how far a record's float values
move when its arithmetic changes, measured on this machine and kept beside the record
(:mod:`decent.run.tolerance`).

The record's first rounds are re-run as this machine runs them, then with another
intra-op thread count (a sum split another way), then with each CPU kernel set this CPU
runs besides its own (each in a new process: torch picks its kernels once). Every re-run
must give the record's integers and clock exactly: a count that moves is not a float's
last bits, and nothing is written. The largest float difference over all of them is the
measurement."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

from decent.core.errors import ConfigError
from decent.run import environment
from decent.run.rerun import rerun
from decent.run.tolerance import FILE, measurement, write

# x86's kernel sets from the plainest up: a CPU runs its own and every one below it
X86_KERNELS = ("default", "avx2", "avx512")


def other_kernels(own: str) -> list[str]:
    """The CPU kernel sets besides ``own`` that this CPU can run."""
    if own in X86_KERNELS:
        return list(X86_KERNELS[:X86_KERNELS.index(own)])
    return [] if own == "default" else ["default"]


def variant(record: Path, rounds: int, threads: int, device: str | None,
            trust_imports: bool = False) -> dict[str, Any]:
    """The record re-run in this process with ``threads`` intra-op threads, every float
    let through: its largest float difference, and the values that must be exact and
    are not."""
    found = rerun(record, rounds, math.inf, None, trust_imports, device,
                  environment.cpu_kernels(), threads)
    return {"cpu_kernels": environment.cpu_kernels(), "intra_op_threads": threads,
            "largest_difference": found.largest,
            "round": None if found.where is None else found.where[0],
            "field": None if found.where is None else found.where[1],
            "not_exact": [m.line() for m in found.mismatches]}


def variant_main() -> None:
    """A new process's :func:`variant`, from ``argv``, printed as one JSON line."""
    record, rounds, threads, device, trust = sys.argv[1:6]
    print(json.dumps(variant(Path(record), int(rounds), int(threads), device or None,
                             trust == "1")))


def in_new_process(record: Path, rounds: int, threads: int, device: str | None,
                   kernels: str, trust_imports: bool) -> dict[str, Any] | None:
    """:func:`variant` with ``kernels``, in a new process told to use them (None where
    this CPU cannot: torch then runs its own)."""
    done = subprocess.run(
        [sys.executable, "-c", "from decent.run.tolerance_measure import variant_main; "
         "variant_main()", str(record), str(rounds), str(threads), device or "",
         "1" if trust_imports else "0"],
        env=environment.with_kernels(kernels), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError("--measure-tolerance", f"the re-run with {kernels} kernels "
                          f"failed: {last}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return found if found["cpu_kernels"] == kernels else None


def measure(record: str | Path, rounds: int, device: str | None = None,
            trust_imports: bool = False, into: str | Path | None = None,
            ) -> tuple[list[str], dict[str, Any] | None]:
    """Measure ``record``'s tolerance over its first ``rounds`` rounds and add it to the
    tolerance file of ``into`` (a folder above the record: the records it covers; default
    the record's own folder): the lines to print, and the file as written (None, and
    nothing written, where a value that must be exact moved)."""
    path = Path(record).expanduser()
    from decent.engine.saved import load_saved_config

    if not (path / "config.yaml").is_file():
        raise ConfigError("run_dir", f"{path} is not a run directory (no config.yaml)")
    folder = path.parent if into is None else Path(into).expanduser()
    if folder.resolve() not in path.resolve().parents:
        raise ConfigError("--into", f"{folder} is not a folder above {path}: a tolerance "
                          "covers the records below its file")
    made_with = load_saved_config(path / "config.yaml", trust_imports).torch_threads
    own = environment.cpu_kernels()
    variants = [variant(path, rounds, t, device, trust_imports)
                for t in (made_with, 2 if made_with == 1 else 1)]
    for kernels in other_kernels(own):
        found = in_new_process(path, rounds, made_with, device, kernels, trust_imports)
        if found is not None:
            variants.append(found)
    lines = [f"measure: {v['cpu_kernels']} kernels, {v['intra_op_threads']} thread(s): "
             f"largest float difference {v['largest_difference']:.3g}"
             + (f" (round {v['round']}, {v['field']})" if v["field"] else "")
             for v in variants]
    moved = [(v, line) for v in variants for line in v["not_exact"]]
    if moved:
        return [*lines, *(f"measure: {v['cpu_kernels']} kernels, {v['intra_op_threads']} "
                          f"thread(s): not exact: {line}" for v, line in moved[:10]),
                "measure: values that must be exact moved: no tolerance written"], None
    machine = environment.describe()
    kept = {key: machine[key] for key in ("cpu_model", "cpu_kernels", "torch", "numpy")}
    written = write(folder, measurement(path, folder, rounds, [
        {k: v for k, v in variant_.items() if k != "not_exact"} for variant_ in variants],
        kept))
    return [*lines, f"measure: {folder / FILE}: tolerance "
            f"{written['tolerance']:g} (largest difference kept "
            f"{written['largest_difference']:.3g}, {len(written['measurements'])} "
            "measurement(s))"], written
