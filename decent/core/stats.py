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
        elif all(isinstance(v, Max) for v in values):
            out[key] = float(max(v.value for v in values))  # type: ignore[union-attr]
        elif all(isinstance(v, (int, float)) for v in values):
            out[key] = float(sum(values) / len(values))  # type: ignore[arg-type]
        else:
            raise TypeError(f"statistic {key!r} mixes kinds across clients: {values[:3]}")
    return out
