"""`decent report`: a Markdown table and plots from finished runs (or sweeps of them).

Runs are grouped by the config keys given with ``--by`` (default: every key whose value
differs between the runs, seeds and names aside); each group's seeds are summarised as
mean ± standard deviation (sample std, n − 1). ``--paired KEY=A,B`` adds a table of
per-seed differences B − A between two arms run with the same seeds (:func:`paired`),
at the end of the runs or at an equal budget of bytes or simulated time. Everything is
read from the run directories' ``config.yaml``, ``summary.json``, ``metrics.jsonl`` and
``edges.json``, so a report can be rebuilt from committed runs without their weights.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from decent.core.errors import ConfigError
from decent.engine.evaluation import lower_is_better

IGNORED = ("name", "seed", "tracking.", "sweep.", "ray.")


@dataclass
class Run:
    path: Path
    config: dict[str, Any]  # flattened: "strategy.lr" → 0.1
    summary: dict[str, Any]
    rows: list[dict[str, Any]]


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def find_runs(paths: list[str]) -> list[Run]:
    runs = []
    for given in paths:
        root = Path(given)
        if not root.exists():
            raise ConfigError("paths", f"{root} does not exist")
        candidates = [root] if (root / "summary.json").is_file() else \
            sorted(p.parent for p in root.rglob("summary.json"))
        for path in candidates:
            if path.name.startswith(".") or not (path / "config.yaml").is_file():
                continue
            rows = [json.loads(line) for line in
                    (path / "metrics.jsonl").read_text().splitlines() if line.strip()]
            runs.append(Run(path, flatten(yaml.safe_load((path / "config.yaml").read_text())),
                            json.loads((path / "summary.json").read_text()), rows))
    if not runs:
        raise ConfigError("paths", f"no finished run (a folder with summary.json) under "
                          f"{', '.join(paths)}")
    return runs


def varying_keys(runs: list[Run]) -> list[str]:
    keys = sorted({k for r in runs for k in r.config})
    return [k for k in keys if not k.startswith(IGNORED)
            and len({json.dumps(r.config.get(k), sort_keys=True) for r in runs}) > 1]


def spread(values: list[float], fmt: str = ".4g") -> str:
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return "—"
    if len(set(values)) == 1:  # one run, or every seed the same (bytes, often)
        return format(values[0], fmt)
    # the spread to two significant digits: more would be noise about noise
    return f"{format(statistics.mean(values), fmt)} ± {statistics.stdev(values):.2g}"


def label(keys: list[str], values: tuple) -> str:
    if not keys:
        return "all runs"
    return ", ".join(f"{k.rsplit('.', 1)[-1] if len(keys) > 1 else k}={v}"
                     for k, v in zip(keys, values, strict=True))


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


def curves(runs: list[Run], metric: str, x: str) -> tuple[list[float], list[float], list[float]]:
    """Mean and std of ``metric`` over the runs at each evaluated round, against ``x``."""
    by_round: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for run in runs:
        for row in run.rows:
            if metric in row:
                by_round[row["round"]].append((row["round"] + 1 if x == "round" else row[x],
                                               row[metric]))
    xs, means, stds = [], [], []
    for r in sorted(by_round):
        points = by_round[r]
        xs.append(statistics.mean(p[0] for p in points))
        ys = [p[1] for p in points]
        means.append(statistics.mean(ys))
        stds.append(statistics.stdev(ys) if len(ys) > 1 else 0.0)
    return xs, means, stds


def plot_metric(groups: dict[tuple, list[Run]], keys: list[str], metric: str, x: str,
                out: Path, log_x: bool) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for values, runs in groups.items():
        xs, means, stds = curves(runs, metric, x)
        if not xs:
            continue
        line, = ax.plot(xs, means, marker="o", markersize=3, label=label(keys, values))
        ax.fill_between(xs, [m - s for m, s in zip(means, stds, strict=True)],
                        [m + s for m, s in zip(means, stds, strict=True)],
                        color=line.get_color(), alpha=0.2)
    names = {"bytes_total": "bytes sent (all edges)", "round": "round",
             "sim_time_total_s": "simulated time (s)"}
    ax.set_xlabel(names[x])
    ax.set_ylabel(f"{metric} (mean ± std over seeds)")
    if log_x:
        ax.set_xscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def plot_edges(run: Run, out: Path) -> bool:
    """The bytes each edge carried over the run, drawn on the graph; False if the run
    has no per-edge record."""
    edges_path = run.path / "edges.json"
    if not edges_path.is_file():
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import networkx as nx

    per_edge: dict[tuple[int, int], float] = defaultdict(float)
    for key, nbytes in json.loads(edges_path.read_text()).items():
        i, j = (int(v) for v in key.split("-"))
        per_edge[(min(i, j), max(i, j))] += nbytes  # both directions of the link
    graph = nx.Graph()
    graph.add_nodes_from(range(int(run.config.get("topology.n", 0))))
    graph.add_edges_from(per_edge)
    fig, ax = plt.subplots(figsize=(5.6, 5.0))
    pos = nx.kamada_kawai_layout(graph) if graph.number_of_nodes() <= 200 else \
        nx.spring_layout(graph, seed=0)
    edges = list(per_edge)
    drawn = nx.draw_networkx_edges(graph, pos, edgelist=edges, ax=ax, width=2.5,
                                   edge_color=[per_edge[e] for e in edges],
                                   edge_cmap=plt.cm.viridis, edge_vmin=0.0)
    nx.draw_networkx_nodes(graph, pos, ax=ax, node_size=60, node_color="#444444")
    fig.colorbar(drawn, ax=ax, label="bytes over the run (both directions)")
    ax.set_title(f"{run.summary.get('strategy')} on {run.summary.get('topology')}, "
                 f"{run.path.name}", fontsize=8)
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return True


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
    None outside the logged range (never extrapolated)."""
    points = [(row[x], row[metric]) for row in run.rows if metric in row and x in row]
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


def report(paths: list[str], metric: str = "gmp_accuracy", by: list[str] | None = None,
           out: str | None = None, columns: str | None = None,
           pairs: list[str] | None = None, at: str = "final") -> Path:
    """``metric`` may list several, comma-separated: the first is compared (final, best,
    plots), the others add a column of their final values. ``columns``: a config key whose
    values become the columns of a second table of the final metric (the rows: the
    ``by`` keys), e.g. the Byzantine fraction across, the aggregator down. ``pairs``: specs
    KEY=A,B, each a table of per-seed differences (:func:`paired`) compared ``at`` the end
    or at equal bytes / simulated time."""
    if at not in AT:
        raise ConfigError("--at", f"choose one of: {', '.join(AT)} (got {at!r})")
    metric, *also = [m.strip() for m in metric.split(",") if m.strip()] or [""]
    runs = find_runs(paths)
    keys = varying_keys(runs) if by is None else by
    for flag, asked in (("--by", keys), ("--columns", [columns] if columns else [])):
        unknown = [k for k in asked if not any(k in r.config for r in runs)]
        if unknown:
            raise ConfigError(flag, f"{unknown[0]!r} is not a config key of these runs "
                              "(e.g. strategy.name, topology.n)")
    if columns:
        keys = [k for k in keys if k != columns] + [columns]
    for m in (metric, *also):
        if any(m in r.summary for r in runs):
            continue
        known = sorted({k for r in runs for k, v in r.summary.items()
                        if isinstance(v, (int, float))})
        raise ConfigError("--metric", f"{m!r} is in no run's summary; choose one of: "
                          f"{', '.join(known)}")
    groups: dict[tuple, list[Run]] = defaultdict(list)
    for run in sorted(runs, key=lambda r: str(r.path)):
        groups[tuple(run.config.get(k) for k in keys)].append(run)
    groups = dict(sorted(groups.items(), key=lambda kv: in_order(kv[0])))
    paired_tables = [paired(runs, keys, spec, metric, at) for spec in pairs or []]
    folder = Path(out) if out else (Path(paths[0]) / "report" if len(paths) == 1
                                    else Path("report"))
    folder.mkdir(parents=True, exist_ok=True)
    where = ", ".join(paths) if len(paths) <= 3 else \
        f"{len(paths)} paths under {os.path.commonpath(paths) or '.'}"
    text = [f"# Report: {metric}\n", f"{len(runs)} runs from {where}\n",
            table(groups, keys, metric, tuple(also))]
    if columns:
        text.append(pivot(runs, keys[:-1], columns, metric))
    text.extend(paired_tables)
    for x, log_x, name in (("bytes_total", True, "vs_bytes"), ("round", False, "vs_rounds"),
                           ("sim_time_total_s", False, "vs_sim_time")):
        png = f"{metric}_{name}.png"
        plot_metric(groups, keys, metric, x, folder / png, log_x)
        text.append(f"![{metric} {name.replace('_', ' ')}]({png})\n")
    for k, (values, runs_of) in enumerate(groups.items()):
        png = f"edges_{k}.png"
        if plot_edges(runs_of[0], folder / png):
            text.append(f"![bytes per edge, {label(keys, values)}]({png})\n")
    (folder / "report.md").write_text("\n".join(text))
    return folder
