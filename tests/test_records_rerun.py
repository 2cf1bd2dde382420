"""The committed experiment records still come out of today's code: per experiment family,
its cheapest record re-run for its first rounds gives its rows exactly
(`decent verify --rerun`, decent.run.rerun)."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest
import yaml

from decent.run.rerun import rerun
from decent.tools.cli import main

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
# Records made before runs kept their CPU kernels (segments.json), with the kernels that
# reproduce them: these ran on an AVX2 machine, and torch's AVX-512 kernels sum a
# transformer's products in another order (the training loss moves by 2.4e-7 in round 0).
# The records of the other families come out the same under both.
KERNELS = {"pretraining": "avx2"}


def absent_data(record: Path) -> str | None:
    """The data folder the record read, where this machine lacks it (a shared data folder
    lives beside the checkout on the machines that have it)."""
    task = yaml.safe_load((record / "config.yaml").read_text()).get("task") or {}
    data_dir = task.get("data_dir")
    return data_dir if data_dir and not Path(data_dir).exists() else None


@pytest.mark.parametrize("family", sorted(RECORDS))
def test_a_committed_record_reruns_exactly(family, monkeypatch, capfd):
    record = ROOT / "experiments" / RECORDS[family]
    missing = absent_data(record)
    if missing:
        pytest.skip(f"{family}: the record reads {missing}, not on this machine")
    monkeypatch.chdir(ROOT)  # records name files relative to the repository root
    rounds = FEWER.get(family, ROUNDS)
    if family in KERNELS:  # in a process with those kernels where this one runs others
        if platform.machine() not in ("x86_64", "AMD64"):
            pytest.skip(f"{family}: the record ran with {KERNELS[family]} kernels, which "
                        f"a {platform.machine()} CPU does not have")
        # the records ran on CPUs with device auto, which picks a GPU where there is one
        assert main(["verify", "--rerun", str(record), "--rounds", str(rounds), "--device",
                     "cpu", "--cpu-kernels", KERNELS[family]]) == 0
        out = capfd.readouterr().out
        assert f"rerun: ran with {KERNELS[family]} CPU kernels" in out
        assert f"rerun ok: {rounds} rounds, " in out, out
        return
    found = rerun(record, rounds, device="cpu")
    assert not found.mismatches, "\n".join(found.lines())
    assert found.compared > 0
