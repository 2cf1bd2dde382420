"""Per-round statistics that clients record and the platform reduces over clients.

A strategy writes ``client.stats[name] = value``. A plain float is averaged over the
clients that reported it (the mean training loss); :class:`Mean` and :class:`Max` say how
to reduce when a plain average over clients would be wrong — a mean over events that
clients saw in different numbers, or a worst case. Reductions run in client order on
every backend, so the reduced figures do not depend on how clients are grouped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Mean:
    """``total / count`` pooled over every client: e.g. the mean staleness over every
    update applied anywhere in the round."""

    total: float
    count: int


@dataclass(frozen=True)
class Max:
    """The largest value any client reported."""

    value: float


Stat = float | Mean | Max
COUNT = "_count"  # a pooled mean's round figure comes with how many events it pooled


def pooled_over_rounds(rows: list[Mapping[str, float]]) -> dict[str, float]:
    """Every pooled mean (a :class:`Mean` statistic) pooled over the whole run, as
    ``<name>_run``: Σ_rounds mean·count / Σ_rounds count — e.g. the mean staleness of every
    update the run applied, not the mean of the rounds' means."""
    out: dict[str, float] = {}
    keys = sorted({k for row in rows for k in row if k + COUNT in row})
    for key in keys:
        pairs = [(row[key], row[key + COUNT]) for row in rows if key + COUNT in row]
        count = sum(c for _, c in pairs)
        if count:
            out[key + "_run"] = float(sum(v * c for v, c in pairs) / count)
    return out


def reduce_stats(per_client: Mapping[int, Mapping[str, Stat]]) -> dict[str, float]:
    """One figure per statistic name over the clients that reported it (client order)."""
    keys = sorted({k for stats in per_client.values() for k in stats})
    out: dict[str, float] = {}
    for key in keys:
        values = [per_client[c][key] for c in sorted(per_client) if key in per_client[c]]
        if all(isinstance(v, Mean) for v in values):
            count = sum(v.count for v in values)  # type: ignore[union-attr]
            if count:
                out[key] = float(sum(v.total for v in values) / count)  # type: ignore[union-attr]
                out[key + COUNT] = float(count)  # so the run's summary can pool the rounds
        elif all(isinstance(v, Max) for v in values):
            out[key] = float(max(v.value for v in values))  # type: ignore[union-attr]
        elif all(isinstance(v, (int, float)) for v in values):
            out[key] = float(sum(values) / len(values))  # type: ignore[arg-type]
        else:
            raise TypeError(f"statistic {key!r} mixes kinds across clients: {values[:3]}")
    return out
