"""``decent verify RUN_DIR``: what is wrong with a finished or interrupted run, one line
per problem — its checkpoints against their manifests, its metric rows, and its summary
against the rows it summarises."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from decent.core.errors import ConfigError
from decent.run import checkpoint

# summary fields that are not functions of the rows (when and how fast it ran)
NOT_FROM_ROWS = {"wall_s", "run_id", "segments_wall_s", "restarts"}


@dataclass
class Findings:
    problems: list[str] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)


def verify(run_dir: str | Path, trust_imports: bool = False) -> Findings:
    """Everything ``decent verify`` checks; one line (``ConfigError``) if ``run_dir`` is
    not a run directory at all."""
    from decent.engine.saved import load_saved_config

    path = Path(run_dir).expanduser()
    if not path.is_dir():
        raise ConfigError("run_dir", f"{path} is not a directory")
    if not (path / "config.yaml").is_file():
        raise ConfigError("run_dir", f"{path} is not a run directory (no config.yaml)")
    found = Findings()
    try:
        cfg = load_saved_config(path / "config.yaml", trust_imports)
    except ConfigError as exc:
        found.problems.append(f"{path / 'config.yaml'}: {exc}")
        cfg = None
    finished = not (path.name.startswith(".") or path.name.endswith(".failed"))
    rows = check_rows(path, cfg, finished, found)
    check_checkpoints(path, found)
    summary = path / "summary.json"
    if finished and not summary.is_file():
        found.problems.append(f"{summary}: missing (a finished run writes it last)")
    elif summary.is_file() and cfg is not None and rows:
        check_summary(summary, cfg, rows, found)
    return found


def check_rows(path: Path, cfg: Any, finished: bool, found: Findings) -> list[dict[str, Any]]:
    metrics = path / checkpoint.METRICS
    if not metrics.is_file():
        found.problems.append(f"{metrics}: missing")
        return []
    rows: list[dict[str, Any]] = []
    lines = metrics.read_bytes().splitlines(keepends=True)
    for k, line in enumerate(lines):
        try:
            row = json.loads(line)
        except ValueError:
            last = k == len(lines) - 1 and not line.endswith(b"\n")
            found.problems.append(
                f"{metrics}: line {k + 1} is cut short (the run was killed while writing "
                "it; `decent resume` drops it)" if last and not finished else
                f"{metrics}: line {k + 1} is not a JSON row")
            break
        if not isinstance(row, dict) or row.get("round") != len(rows):
            found.problems.append(f"{metrics}: line {k + 1} is round "
                                  f"{row.get('round') if isinstance(row, dict) else '?'}, "
                                  f"where round {len(rows)} belongs")
            break
        rows.append(row)
    if cfg is not None:
        if finished and len(rows) != cfg.rounds:
            found.problems.append(f"{metrics}: {len(rows)} rows; the run has {cfg.rounds} "
                                  "rounds")
        found.facts.append(f"{len(rows)} of {cfg.rounds} rounds")
    return rows


def check_checkpoints(path: Path, found: Findings) -> None:
    rounds = sorted(checkpoint.found_rounds(path))
    for r in rounds:
        found.problems += checkpoint.problems(path, checkpoint.folder_name(r))
    pointer = path / checkpoint.POINTER
    if pointer.is_file():
        try:
            info = checkpoint.read_pointer(path)
        except ConfigError as exc:
            found.problems.append(str(exc).partition(": ")[2] or str(exc))
        else:  # the named folder's own problems are listed above already
            found.problems += [p for p in checkpoint.named_problems(path, info)
                               if p not in found.problems]
    elif rounds:
        found.problems.append(f"{pointer}: missing, beside {len(rounds)} checkpoint(s)")
    if rounds:
        found.facts.append(f"{len(rounds)} checkpoint(s), newest at round {rounds[-1]}")


def check_summary(summary_path: Path, cfg: Any, rows: list[dict[str, Any]],
                  found: Findings) -> None:
    from decent.run.summary import summarize_rows

    try:
        summary = json.loads(summary_path.read_text())
    except ValueError as exc:
        found.problems.append(f"{summary_path}: unreadable ({exc})")
        return
    if len(rows) != cfg.rounds:
        return  # said already: the rows do not cover the run
    expected = summarize_rows(cfg, rows, summary.get("wall_s", 0.0), summary.get("run_id", ""))
    before = len(found.problems)
    for key, want in expected.items():
        if key in NOT_FROM_ROWS or key not in summary:
            continue
        if not same(summary[key], want):
            found.problems.append(f"{summary_path}: {key} is {summary[key]!r}, the rows "
                                  f"give {want!r}")
    if len(found.problems) == before:
        found.facts.append("summary consistent with the rows")


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)
