"""The report's tables: one row per group of runs (mean ± std over seeds), and the final
metric pivoted by one config key; the cell formatting and row order they share."""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict

from decent.engine.evaluation import lower_is_better
from decent.tools.run_records import Run


def spread(values: list[float], fmt: str = ".4g") -> str:
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return "—"
    if len(set(values)) == 1:  # one run, or every seed the same (bytes, often)
        return format(values[0], fmt)
    # the spread to two significant digits: more would be noise about noise
    return f"{format(statistics.mean(values), fmt)} ± {statistics.stdev(values):.2g}"


def label(keys: list[str], values: tuple) -> str:
    """``k=v, ...``; with several keys each by its last part (``lr=0.1``), unless two keys
    share it (``name=pretrain-dsgd, strategy.name=dsgd``)."""
    if not keys:
        return "all runs"
    short = [k.rsplit(".", 1)[-1] for k in keys]
    names = keys if len(keys) == 1 else \
        [s if short.count(s) == 1 else k for s, k in zip(short, keys, strict=True)]
    return ", ".join(f"{n}={v}" for n, v in zip(names, values, strict=True))


def best(run: Run, metric: str) -> float | None:
    values = [r[metric] for r in run.rows if metric in r]
    if not values:
        return None
    return min(values) if lower_is_better(metric) else max(values)


def table(groups: dict[tuple, list[Run]], keys: list[str], metric: str,
          also: tuple[str, ...] = ()) -> str:
    """One row per group; ``also``: further summary metrics, one column each."""
    extra = "".join(f" {m} |" for m in also)
    head = (f"| {' / '.join(keys) or 'runs'} | seeds | final {metric} | best {metric} |{extra} "
            "bytes sent | busiest edge (bytes) | simulated time (s) | time to target (s) |")
    lines = [head, "|" + "---|" * (8 + len(also))]
    for values, runs in groups.items():
        reached = [r.summary["time_to_target_s"] for r in runs
                   if r.summary.get("time_to_target_s") is not None]
        rounds = [r.summary["rounds_to_target"] for r in runs
                  if r.summary.get("rounds_to_target") is not None]
        target = "—" if not any("time_to_target_s" in r.summary for r in runs) else \
            f"{spread(reached, '.3g')} ({len(reached)}/{len(runs)} reached" + \
            (f", in {spread(rounds, '.3g')} rounds)" if rounds else ")")
        lines.append(
            f"| {label(keys, values)} | {len(runs)} "
            f"| {spread([r.summary.get(metric) for r in runs])} "
            f"| {spread([best(r, metric) for r in runs])} "
            + "".join(f"| {spread([r.summary.get(m) for r in runs])} " for m in also) +
            f"| {spread([r.summary['bytes_total'] for r in runs], '.3e')} "
            f"| {spread([r.summary['max_edge_bytes_total'] for r in runs], '.3e')} "
            f"| {spread([r.summary['sim_time_total_s'] for r in runs], '.3g')} | {target} |")
    return "\n".join(lines) + "\n"


def final_cell(runs: list[Run], metric: str) -> str:
    """mean ± std of the runs' final ``metric``; a run that ended on inf or nan (diverged)
    is counted, not averaged."""
    values = [r.summary.get(metric) for r in runs]
    bad = sum(1 for v in values if v is not None and not math.isfinite(v))
    cell = spread(values)
    if bad:
        cell = f"diverged ({bad}/{len(runs)})" if cell == "—" else \
            f"{cell}, {bad}/{len(runs)} diverged"
    return cell


def pivot(runs: list[Run], rows: list[str], column: str, metric: str) -> str:
    """The final ``metric`` with one column per value of the config key ``column`` and one
    row per combination of ``rows``; blank where no run has that combination."""
    cells: dict[tuple, dict[str, list[Run]]] = defaultdict(lambda: defaultdict(list))
    for run in sorted(runs, key=lambda r: str(r.path)):
        cells[tuple(run.config.get(k) for k in rows)][json.dumps(run.config.get(column))] \
            .append(run)
    columns = sorted({c for by_col in cells.values() for c in by_col}, key=_order)
    counts = sorted({len(rs) for by_col in cells.values() for rs in by_col.values()})
    seeds = str(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
    head = f"| {' / '.join(rows) or 'runs'} | " + " | ".join(
        f"{column.rsplit('.', 1)[-1]}={json.loads(c)}" for c in columns) + " |"
    lines = [f"Final {metric} by {column} (seeds per cell: {seeds}):\n", head,
             "|" + "---|" * (1 + len(columns))]
    for values in sorted(cells, key=in_order):
        lines.append(f"| {label(rows, values)} | " + " | ".join(
            final_cell(cells[values][c], metric) if c in cells[values] else ""
            for c in columns) + " |")
    return "\n".join(lines) + "\n"


def in_order(values: tuple) -> list[tuple]:
    """A sort key for a row's config values: numbers in numeric order (R = 1, 2, 4, 16,
    not 1, 16, 2, 4), before words, before unset (None)."""
    return [(2, 0, "") if v is None else
            (0, v, "") if isinstance(v, (int, float)) and not isinstance(v, bool) else
            (1, 0, str(v)) for v in values]


def _order(encoded: str) -> tuple:
    value = json.loads(encoded)  # numbers in numeric order, before anything else
    return (0, value, "") if isinstance(value, (int, float)) else (1, 0, str(value))
