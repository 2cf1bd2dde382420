"""``decent report --paired KEY=A,B``: per-seed differences between two arms run with the
same seeds, at the end of the runs or at an equal budget of bytes or simulated time."""

from __future__ import annotations

import itertools
import json
import statistics
from collections import defaultdict
from typing import Any

from decent.core.errors import ConfigError
from decent.engine.evaluation import lower_is_better
from decent.tools.report_tables import in_order, label, spread
from decent.tools.run_records import Run

AT = {"final": None, "bytes": "bytes_total", "sim_time": "sim_time_total_s"}


def parse_paired(spec: str) -> tuple[str, str, str]:
    """``KEY=A,B`` → (key, a, b)."""
    key, _, arms = spec.partition("=")
    values = arms.split(",")
    if not key or len(values) != 2 or not all(values):
        raise ConfigError("--paired", f"give KEY=A,B, e.g. strategy.name=fedavg,spes "
                          f"(got {spec!r})")
    return key, values[0], values[1]


def _text(value: Any) -> str:
    return str(value) if not isinstance(value, (dict, list)) else json.dumps(value)


def value_at(run: Run, metric: str, x: str, at: float) -> float | None:
    """``metric`` of the run at budget ``at`` of the summary quantity ``x`` (bytes_total,
    sim_time_total_s), linearly interpolated between the logged evaluations around it;
    None outside the logged range (never extrapolated). A run evaluated before training
    (``eval.initial``) starts its curve there, at 0 bytes and 0 s: a method that has sent
    nothing yet stands at its initial model."""
    before = run.summary.get(f"initial_{metric}")
    points = [(0.0, before)] if before is not None else []
    points += [(row[x], row[metric]) for row in run.rows if metric in row and x in row]
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if x0 <= at <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (at - x0) / (x1 - x0)
    if points and points[0][0] == at:
        return points[0][1]
    return None


def paired(runs: list[Run], keys: list[str], spec: str, metric: str, at: str) -> str:
    """Per-seed differences B − A of ``metric`` between the runs whose config ``key`` is A
    and those where it is B (``spec`` = KEY=A,B). Each B run is paired with the A run of
    the same seed whose other ``keys`` agree (a key one arm does not have — None — agrees
    with anything: FedAvg has no merge_warmup_steps to pair SPES's on). ``at``: compare the
    final values (``final``), or both at the smaller of the two runs' final bytes
    (``bytes``) or simulated time (``sim_time``), the longer run's curve interpolated
    there: an equal budget, not an equal number of rounds."""
    key, a, b = parse_paired(spec)
    if not any(key in r.config for r in runs):
        raise ConfigError("--paired", f"{key!r} is not a config key of these runs")
    arm_a = [r for r in runs if _text(r.config.get(key)) == a]
    arm_b = [r for r in runs if _text(r.config.get(key)) == b]
    for arm, name in ((arm_a, a), (arm_b, b)):
        if not arm:
            raise ConfigError("--paired", f"no run has {key}={name}")
    others = [k for k in keys if k != key]

    def agree(ra: Run, rb: Run) -> bool:
        if ra.config.get("seed") != rb.config.get("seed"):
            return False
        return all(ra.config.get(k) is None or rb.config.get(k) is None
                   or ra.config.get(k) == rb.config.get(k) for k in others)

    x = AT[at]
    rows: dict[tuple, list[tuple[Any, float, float, float | None]]] = defaultdict(list)
    for rb in sorted(arm_b, key=lambda r: str(r.path)):
        partners = [ra for ra in arm_a if agree(ra, rb)]
        if len(partners) > 1:
            raise ConfigError("--paired", f"{rb.path.name} pairs with {len(partners)} runs of "
                              f"{key}={a}; add the key that tells them apart to --by")
        if not partners:
            continue
        ra = partners[0]
        if x is None:
            va, vb, budget = ra.summary.get(metric), rb.summary.get(metric), None
        else:
            budget = min(ra.summary[x], rb.summary[x])
            va, vb = value_at(ra, metric, x, budget), value_at(rb, metric, x, budget)
        if va is None or vb is None:
            continue
        rows[tuple(rb.config.get(k) for k in others)].append(
            (rb.config.get("seed"), va, vb, budget))
    if not rows:
        raise ConfigError("--paired", f"no run of {key}={b} has a partner of {key}={a} with "
                          "the same seed" + ("" if x is None else f" and a logged {metric} "
                                             f"at the common {x}"))
    lower = lower_is_better(metric)
    where = "at the end of the runs" if x is None else \
        f"at equal {x} (the smaller final {x} of each pair; the other run's curve " \
        "interpolated there)"
    lines = [f"Paired by seed: {metric} of {key}={b} minus {key}={a}, {where}; "
             f"negative is {b} ahead\n" if lower else
             f"Paired by seed: {metric} of {key}={b} minus {key}={a}, {where}; "
             f"positive is {b} ahead\n",
             f"| {' / '.join(others) or 'runs'} | pairs | {a} | {b} | {b} − {a} "
             f"| seeds {b} ahead | per seed ({b} − {a}) |" + (f" at {x} |" if x else ""),
             "|" + "---|" * (7 + (1 if x else 0))]
    for values in sorted(rows, key=in_order):
        pairs = sorted(rows[values], key=lambda p: in_order((p[0],)))
        diffs = [vb - va for _, va, vb, _ in pairs]
        ahead = sum(1 for d in diffs if (d < 0 if lower else d > 0))
        per_seed = ", ".join(f"s{seed}: {vb - va:+.3g}" for seed, va, vb, _ in pairs)
        diff = f"{statistics.mean(diffs):+.3g}" + \
            (f" ± {statistics.stdev(diffs):.2g}" if len(diffs) > 1 else "")
        budget = "" if x is None else f" {spread([p[3] for p in pairs], '.4g')} |"
        lines.append(f"| {label(others, values)} | {len(pairs)} "
                     f"| {spread([p[1] for p in pairs])} | {spread([p[2] for p in pairs])} "
                     f"| {diff} | {ahead}/{len(pairs)} | {per_seed} |{budget}")
    return "\n".join(lines) + "\n"
