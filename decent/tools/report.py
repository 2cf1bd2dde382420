"""`decent report`: a Markdown table and plots from finished runs (or sweeps of them).

Runs are grouped by the config keys given with ``--by`` (default: every key whose value
differs between the runs, seeds and names aside); each group's seeds are summarised as
mean ± standard deviation (sample std, n − 1). ``--paired KEY=A,B`` adds a table of
per-seed differences B − A between two arms run with the same seeds (:mod:`.report_paired`),
at the end of the runs or at an equal budget of bytes or simulated time. Everything is
read from the run directories' ``config.yaml``, ``summary.json``, ``metrics.jsonl`` and
``edges.json``, so a report can be rebuilt from committed runs without their weights.
The plots draw one panel per value of ``--facet KEY`` and tie colour and line style to the
values of ``--color KEY`` and ``--style KEY`` (:mod:`.report_plots`).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

from decent.core.errors import ConfigError
from decent.tools.report_edges import plot_edges
from decent.tools.report_paired import AT, paired
from decent.tools.report_plots import plot_metric
from decent.tools.report_select import selection_table
from decent.tools.report_tables import in_order, label, pivot, table
from decent.tools.run_records import Run, find_runs, varying_keys


def report(paths: list[str], metric: str = "gmp_accuracy", by: list[str] | None = None,
           out: str | None = None, columns: str | None = None,
           pairs: list[str] | None = None, at: str = "final", facet: str | None = None,
           color: str | None = None, style: str | None = None,
           select: str | None = None) -> Path:
    """``metric`` may list several, comma-separated: the first is compared (final, best,
    plots), the others add a column of their final values. ``columns``: a config key whose
    values become the columns of a second table of the final metric (the rows: the
    ``by`` keys), e.g. the Byzantine fraction across, the aggregator down. ``pairs``: specs
    KEY=A,B, each a table of per-seed differences (:func:`.report_paired.paired`)
    compared ``at`` the end or at equal bytes / simulated time. ``facet``, ``color``,
    ``style``: config keys whose values give the plots' panels, colours and line styles
    (a key that is not among the ``by`` keys splits the plotted series by it too).
    ``select``: ``val_loss`` adds the table of :mod:`.report_select` (each group's
    configuration chosen on validation, its test figure)."""
    if at not in AT:
        raise ConfigError("--at", f"choose one of: {', '.join(AT)} (got {at!r})")
    metric, *also = [m.strip() for m in metric.split(",") if m.strip()] or [""]
    runs = find_runs(paths)
    keys = varying_keys(runs) if by is None else by
    for flag, asked in (("--by", keys), ("--columns", [columns] if columns else []),
                        ("--facet", [facet] if facet else []),
                        ("--color", [color] if color else []),
                        ("--style", [style] if style else [])):
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
    # the plots' series: the table's groups, split further by a plot key not among --by;
    # the legend leaves out such a key where no group has two values of it (--by name
    # --color strategy.name: the name tells the strategy already)
    drawn = list(dict.fromkeys(k for k in (facet, color, style) if k and k not in keys))
    plot_keys = keys + drawn
    plot_groups: dict[tuple, list[Run]] = defaultdict(list)
    for values, runs_of in groups.items():
        for run in runs_of:
            plot_groups[values + tuple(run.config.get(k) for k in drawn)].append(run)
    plot_groups = dict(sorted(plot_groups.items(), key=lambda kv: in_order(kv[0])))
    same = {k for k in drawn if all(
        len({json.dumps(r.config.get(k), sort_keys=True) for r in rs}) == 1
        for rs in groups.values())}
    shown = [k for k in plot_keys if k != facet and k not in same]
    paired_tables = [paired(runs, keys, spec, metric, at) for spec in pairs or []]
    if select:  # refused before anything is written
        selection_table(groups, keys, metric, select)
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
    if select:
        text.append(selection_table(groups, keys, metric, select))
    for x, log_x, name in (("bytes_total", True, "vs_bytes"), ("round", False, "vs_rounds"),
                           ("sim_time_total_s", False, "vs_sim_time")):
        png = f"{metric}_{name}.png"
        plot_metric(plot_groups, plot_keys, metric, x, folder / png, log_x, facet, color,
                    style, shown)
        text.append(f"![{metric} {name.replace('_', ' ')}]({png})\n")
    for k, (values, runs_of) in enumerate(groups.items()):
        png = f"edges_{k}.png"
        if plot_edges(runs_of[0], folder / png):
            text.append(f"![bytes per directed edge (row: sender, column: receiver), "
                        f"{label(keys, values)}]({png})\n")
    (folder / "report.md").write_text("\n".join(text))
    return folder
