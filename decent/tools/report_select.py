"""`decent report --select val_loss`: a table row as the SeedFlood and MeZO protocol
computes it. Within each ``--by`` group, the candidate configurations are the values of
the keys that still differ between its runs (a learning-rate grid, seeds aside); the one
whose runs have the lowest mean validation loss at their selected evaluation (``eval.select:
val_loss``: each run's own best checkpoint by validation loss) is chosen, and its runs'
test figure at that checkpoint is the row's. Nothing is read off the test set to choose."""

from __future__ import annotations

import statistics
from collections import defaultdict

from decent.core.errors import ConfigError
from decent.tools.report_tables import in_order, label, spread
from decent.tools.run_records import Run, varying_keys

SELECTIONS = ("val_loss",)


def selection_table(groups: dict[tuple, list[Run]], keys: list[str], metric: str,
                    select: str) -> str:
    """One row per group: the chosen configuration, its seeds, its mean selected
    validation loss, its test ``metric`` at the selected checkpoint, and every candidate's
    validation loss (what the choice was made on)."""
    if select not in SELECTIONS:
        raise ConfigError("--select", f"choose one of: {', '.join(SELECTIONS)} (got {select!r})")
    field = f"selected_{select}"
    runs = [r for rs in groups.values() for r in rs]
    if not all(field in r.summary for r in runs):
        raise ConfigError("--select", f"{sum(field not in r.summary for r in runs)} of these "
                          f"runs hold no {field}: run them with eval.select={select}")
    lines = [f"Selected by {select} (`--select`): within each group the configuration of "
             f"lowest mean {field}, reported at each run's checkpoint of lowest {select}.\n",
             f"| {' / '.join(keys) or 'runs'} | chosen | seeds | {field} | selected_{metric} "
             "| candidates (mean " + select + ") |", "|---|---|---|---|---|---|"]
    for values, members in groups.items():
        inner = varying_keys(members)
        candidates: dict[tuple, list[Run]] = defaultdict(list)
        for run in members:
            candidates[tuple(run.config.get(k) for k in inner)].append(run)
        score = {c: statistics.mean(r.summary[field] for r in rs) for c, rs in candidates.items()}
        ordered = sorted(candidates, key=in_order)
        chosen = min(ordered, key=lambda c: score[c])  # the first in order on a tie
        picked = candidates[chosen]
        listed = ", ".join(f"{label(inner, c)}: {score[c]:.4g}"
                           for c in ordered)
        lines.append(f"| {label(keys, values)} | {label(inner, chosen) if inner else '—'} "
                     f"| {len(picked)} | {spread([r.summary[field] for r in picked])} "
                     f"| {spread([r.summary.get(f'selected_{metric}') for r in picked])} "
                     f"| {listed} |")
    return "\n".join(lines) + "\n"
