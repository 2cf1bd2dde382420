"""How far a record's float values may move when it is re-run where its arithmetic is not
the one that made it (another CPU, another thread count, other kernels): measured, and
written beside the record (``rerun_tolerance.json``).

Counts, bytes, messages and the simulated clock are integers or sums of them and of
declared figures: they are the same on any machine, and compared exactly. Float values
that come out of the model (losses, accuracies, distances) are sums of products, whose
order decides their last bits; they are compared by

    |rerun − recorded| ≤ tolerance · max(1, |recorded|)

(relative to the value, absolute below 1: a loss of 25.6 and a distance of 1e-4 are both
held to their last bits). The tolerance of a folder of records is measured on one of them
(:func:`measure`): its first rounds re-run on this machine with another intra-op thread
count and with each CPU kernel set this CPU runs besides its own, the largest difference
from the record taken, and ten times that stated (never below :data:`FLOOR`). Each
measurement is kept in the file with how it was made; the tolerance is from the largest.
A re-run finds the nearest file in the record's folder or above (:func:`find`)."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FILE = "rerun_tolerance.json"
FACTOR = 10.0  # the margin over the largest difference measured
# a float32 value near 1 has ulps of 1.2e-7: eight of them, the least a tolerance says
FLOOR = 1e-6
# where no measurement is found: above what most committed families measure (≤ 3e-7), but
# not SPES's 20 AdamW steps through a top-2 router (its gradient norm moves by 3.7e-4 with
# another thread count): a family of records measures its own
DEFAULT = 1e-4
RULE = ("|rerun - recorded| <= tolerance * max(1, |recorded|) for float values; integers "
        "and the simulated clock (sim_*) exactly")


def exact_field(key: str, value: Any) -> bool:
    """Whether ``key`` is compared exactly on any machine: an integer (a count, bytes, a
    round) or the simulated clock (``sim_*``: sums of declared and counted figures)."""
    return key.startswith("sim_") or (isinstance(value, int) and not isinstance(value, bool))


def scaled(recorded: float, rerun: float) -> float:
    """The difference as the tolerance bounds it (relative, absolute below 1)."""
    return abs(rerun - recorded) / max(1.0, abs(recorded))


@dataclass(frozen=True)
class Tolerance:
    """The tolerance a re-run uses and where it comes from (``source``: the file, or why
    there is none); ``largest`` the largest difference measured."""

    value: float
    source: str
    largest: float | None = None

    def says(self) -> str:
        if self.largest is None:
            return f"floats within {self.value:g} ({self.source})"
        return (f"floats within {self.value:g} ({self.source}: largest difference measured "
                f"{self.largest:.3g})")


def find(record: Path) -> Tolerance:
    """The tolerance of ``record``: from the nearest :data:`FILE` in its folder or above,
    else :data:`DEFAULT`."""
    for folder in Path(record).expanduser().absolute().parents:
        path = shown(folder / FILE)
        if path.is_file():
            try:
                kept = json.loads(path.read_text())
                return Tolerance(float(kept["tolerance"]), str(path),
                                 float(kept["largest_difference"]))
            except (ValueError, KeyError, TypeError):
                from decent.core.errors import ConfigError

                raise ConfigError("run_dir", f"{path} is not a tolerance file (its "
                                  "'tolerance' and 'largest_difference' numbers)") from None
    return Tolerance(DEFAULT, f"no {FILE} beside the record: the default; "
                     "--measure-tolerance measures one")


def shown(path: Path) -> Path:
    """``path`` relative to the current folder where it is below it (as a user names it)."""
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


def stated(largest: float) -> float:
    """The tolerance stated for a largest measured difference: FACTOR times it, at least
    FLOOR, rounded up to one significant digit (a figure a reader can hold)."""
    value = max(FLOOR, FACTOR * largest)
    exponent = math.floor(math.log10(value))
    return math.ceil(value / 10 ** exponent) * 10 ** exponent


def write(folder: Path, measurement: dict[str, Any]) -> dict[str, Any]:
    """Add ``measurement`` to ``folder``'s tolerance file (made if absent), the tolerance
    stated from the largest difference of all it keeps; the file as written."""
    path = folder / FILE
    try:
        kept = json.loads(path.read_text()) if path.is_file() else {}
    except ValueError:
        kept = {}
    measurements = [m for m in kept.get("measurements", []) if isinstance(m, dict)]
    measurements.append(measurement)
    largest = max(float(m["largest_difference"]) for m in measurements)
    out = {"tolerance": stated(largest), "largest_difference": largest, "rule": RULE,
           "stated_as": f"{FACTOR:g} x the largest difference measured, at least {FLOOR:g}",
           "measurements": measurements}
    text = json.dumps(out, indent=2) + "\n"
    scratch = path.with_suffix(".partial")
    scratch.write_text(text)
    scratch.replace(path)  # whole or not at all
    return out


def measurement(record: Path, folder: Path, rounds: int, variants: list[dict[str, Any]],
                machine: dict[str, Any]) -> dict[str, Any]:
    """One measurement as the file in ``folder`` keeps it: on which record (its path from
    there), over how many rounds, each variant's largest difference, and the machine it
    ran on."""
    worst = max(variants, key=lambda v: v["largest_difference"])
    return {"record": str(record.resolve().relative_to(folder.resolve())), "rounds": rounds,
            "largest_difference": worst["largest_difference"],
            "field": worst.get("field"), "round": worst.get("round"),
            "how": "the record re-run on this machine with another intra-op thread count "
                   "and with each other CPU kernel set it runs",
            "variants": variants, "machine": machine,
            "date": time.strftime("%Y-%m-%d")}
