"""The committed experiment records still come out of today's code: per experiment family,
its cheapest record re-run for its first rounds gives its rows exactly where this CPU runs
the kernels that made it, and to the last bits of float32 where it runs others
(`decent verify --rerun`, decent.run.rerun)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from decent.run import environment
from decent.run.rerun import kernels_wanted, rerun

ROOT = Path(__file__).resolve().parents[1]
ROUNDS = 3  # enough for every method's first exchange to land in the rows

# One record per family: the cheapest by model size and time per round (each re-runs its
# 3 rounds in under 2 s on a 2-core CPU).
RECORDS = {
    "combo": "combo/runs/churn/churn-s1-20261127-233516-c3be",
    "dso": "dso/runs/scope/digits-global-s0-20261127-224815-bd2d",
    "faults": "faults/runs/signflip20-s1-20261123-081636-a6c3",
    "gasloc": "gasloc/acceleration/runs/lr0.02-outer_momentum0.5-seed0-20261123-104925-2d3e",
    "pretraining": "pretraining/runs/pretrain-fedavg-star-20261123-102722-b6a6",
    "seedflood": "seedflood/delayed/runs/hops0-seed2-20261123-091653-06fe",
    "sgp": "sgp/runs/osgp-one-peer-20261128-014200-4b75",
    "spes": "spes/runs/spes-n4-s0-20261127-225425-9c16",
}
# rounds re-run where fewer than ROUNDS: SPES's round is 20 AdamW steps of a mixture of
# experts on 4 workers (~6 s of CPU each); its first round trains, uploads and syncs
FEWER = {"spes": 1, "pretraining": 1}
# The CPU kernels that made the records made before runs kept theirs (segments.json keeps
# them since): pretraining's ran on an AVX2 machine, combo's, DSO's and SPES's on an AVX-512
# one; faults' and SeedFlood's came out the same under both there.
KERNELS = {"pretraining": "avx2", "combo": "avx512", "dso": "avx512", "spes": "avx512"}
# Another CPU's kernels and BLAS sum a product in another order: a record re-run there
# moves its float values in the last bits (by up to 5e-7 over these rounds, measured on an
# AVX2 machine against the AVX-512 records), never its counts, bytes or clock. SPES's round
# is 20 AdamW steps through a top-2 router, which carry that difference to 2e-5 of a value
# (its perplexity, ~25.6, by 4.2e-4).
LAST_BITS = {"spes": 1e-3}
LAST_BITS_DEFAULT = 1e-6


def absent_data(record: Path) -> str | None:
    """The data folder the record read, where this machine lacks it (a shared data folder
    lives beside the checkout on the machines that have it)."""
    task = yaml.safe_load((record / "config.yaml").read_text()).get("task") or {}
    data_dir = task.get("data_dir")
    return data_dir if data_dir and not Path(data_dir).exists() else None


@pytest.mark.parametrize("family", sorted(RECORDS))
def test_a_committed_record_reruns_as_it_was_made(family, monkeypatch):
    """Bit for bit on the kernels that made it; on a CPU with others, to its last bits."""
    record = ROOT / "experiments" / RECORDS[family]
    missing = absent_data(record)
    if missing:
        pytest.skip(f"{family}: the record reads {missing}, not on this machine")
    monkeypatch.chdir(ROOT)  # records name files relative to the repository root
    made_with = kernels_wanted(record) or KERNELS.get(family)
    own = environment.cpu_kernels()
    tolerance = 0.0 if made_with == own else LAST_BITS.get(family, LAST_BITS_DEFAULT)
    # the records ran on CPUs with device auto, which picks a GPU where there is one
    found = rerun(record, FEWER.get(family, ROUNDS), tolerance, device="cpu", cpu_kernels=own)
    assert not found.mismatches, "\n".join(found.lines())
    assert found.compared > 0
    assert f"ran with {own} CPU kernels" in "\n".join(found.notes)
