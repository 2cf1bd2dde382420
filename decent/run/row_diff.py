"""Metric rows of a record against the rows of its re-run (``decent verify --rerun``):
which fields are compared, which values differ, and the lines that say so."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from decent.run.tolerance import exact_field, scaled

# Row fields that are not a function of the config and seed, left out of every comparison.
# Each is what the host that ran the round measured, so a re-run on another machine (or the
# same one under another load) differs without anything being wrong.
HOST_FIELDS: dict[str, str] = {
    "round_wall_s": "the round's wall-clock seconds: the host's speed and load",
    # the same figure's name in rows written before it was named apart from the summary's
    "wall_s": "the round's wall-clock seconds (a record made before round_wall_s)",
}
# With compute.mode=measured a client's simulated compute time is its measured wall time
# (decent.engine.compute), so the simulated clock is the host's as well.
MEASURED_FIELDS: dict[str, str] = {
    "sim_compute_s": "measured wall time of the clients' compute (compute.mode=measured)",
    "sim_time_s": "includes the measured compute time (compute.mode=measured)",
    "sim_time_total_s": "includes the measured compute time (compute.mode=measured)",
}
SHOWN = 10  # mismatches printed one per line; the rest only counted
ABSENT = "absent"  # shown as the re-run's value of a field its row lacks


@dataclass(frozen=True)
class Mismatch:
    """One value that differs: ``rerun_has`` is False where the re-run's row lacks the
    field; ``diff`` is None unless both are numbers."""

    round: int | str
    field: str
    recorded: Any
    rerun: Any
    diff: float | None
    rerun_has: bool = True

    def line(self) -> str:
        rerun = repr(self.rerun) if self.rerun_has else ABSENT
        diff = "n/a" if self.diff is None else f"{self.diff:.3g}"
        return (f"round {self.round}, {self.field}: recorded {self.recorded!r}, "
                f"rerun {rerun}, |diff| {diff}")


@dataclass
class Comparison:
    """Rows against rows: every value exactly where ``tolerance`` is 0, else integers and
    the simulated clock exactly and float values within ``tolerance`` (relative, absolute
    below 1: :mod:`decent.run.tolerance`). ``largest`` is the largest such difference
    among the float values, within the tolerance or not (``where``: its round, field)."""

    rounds: int
    tolerance: float
    compared: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    new_fields: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)  # what was left out, said first
    largest: float = 0.0
    where: tuple[int | str, str] | None = None

    def add_rows(self, label: int | str, recorded: dict[str, Any], rerun: dict[str, Any],
                 excluded: set[str]) -> None:
        """Compare every field the recorded row has (``excluded`` and the round index
        aside); one the re-run lacks differs (an evaluation that moved rounds). A field
        only the re-run has is a figure added to the rows since the record was made: it
        is named, not compared, as there is nothing recorded to reproduce."""
        self.new_fields |= rerun.keys() - recorded.keys() - excluded
        for key in sorted(recorded.keys() - excluded - {"round"}):
            self.compared += 1
            if key not in rerun:
                self.mismatches.append(Mismatch(label, key, recorded[key], None, None,
                                                rerun_has=False))
                continue
            value, again = recorded[key], rerun[key]
            floats = is_number(value) and is_number(again) and not exact_field(key, value)
            if floats and math.isfinite(value) and math.isfinite(again):
                gap = scaled(value, again)
                if gap > self.largest:
                    self.largest, self.where = gap, (label, key)
            mismatch = differs(label, key, value, again, self.tolerance if floats else 0.0)
            if mismatch is not None:
                self.mismatches.append(mismatch)

    def lines(self) -> list[str]:
        """What was left out, the first mismatches and a count of the rest, the fields
        only the re-run has, and the verdict last."""
        out = [f"rerun: {note}" for note in self.notes]
        out += [f"rerun: {m.line()}" for m in self.mismatches[:SHOWN]]
        if len(self.mismatches) > SHOWN:
            out.append(f"rerun: ... and {len(self.mismatches) - SHOWN} more")
        if self.new_fields:
            out.append(f"rerun: not in the record, not compared: "
                       f"{', '.join(sorted(self.new_fields))}")
        within = f" within {self.tolerance:g}" if self.tolerance else ""
        if not self.mismatches:
            if not self.tolerance:
                return [*out, f"rerun ok: {self.rounds} rounds, {self.compared} values equal"]
            at = "" if self.where is None else f", round {self.where[0]}, {self.where[1]}"
            return [*out, f"rerun ok: {self.rounds} rounds, {self.compared} values equal, "
                    f"floats{within} (largest difference {self.largest:.3g}{at})"]
        numeric = [m for m in self.mismatches if m.diff is not None]
        worst = max(numeric, key=lambda m: m.diff or 0.0, default=None)
        largest = ("" if worst is None else f"; largest |diff| {worst.diff:.3g} "
                   f"(round {worst.round}, {worst.field})")
        return [*out, f"rerun differs: {len(self.mismatches)} of {self.compared} values "
                f"over {self.rounds} rounds not equal{within}{largest}"]


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def differs(label: int | str, key: str, recorded: Any, rerun: Any,
            tolerance: float) -> Mismatch | None:
    if is_number(recorded) and is_number(rerun):
        if recorded == rerun or (math.isnan(recorded) and math.isnan(rerun)):
            return None
        diff = abs(recorded - rerun)
        within = scaled(recorded, rerun) <= tolerance
        return None if within else Mismatch(label, key, recorded, rerun, diff)
    if recorded == rerun:
        return None
    return Mismatch(label, key, recorded, rerun, None)
