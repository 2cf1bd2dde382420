"""The committed experiment records still come out of today's code, on any machine: per
experiment family, its cheapest record re-run for its first rounds gives its integers and
clock exactly and its floats within the tolerance measured beside it
(``rerun_tolerance.json``; `decent verify --rerun`, decent.run.rerun). Each is re-run with
another thread count than it was made with, so its fingerprint differs here as it does on
another machine and the path a reviewer's machine takes is the one tested, on every run;
the bit-for-bit claim, where fingerprints match, is tested on records made in the test
(tests/test_verify_rerun.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from decent.run import environment
from decent.run.rerun import rerun
from decent.run.tolerance import FILE, find, stated

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
    "robust": "robust/runs/dsgd-dissensus-clipped_gossip-s0-20261204-190812-7e52",
    "seedflood": "seedflood/delayed/runs/hops0-seed2-20261123-091653-06fe",
    "sgp": "sgp/runs/osgp-one-peer-20261128-014200-4b75",
    "spes": "spes/runs/spes-n4-s0-20261127-225425-9c16",
}
# rounds re-run where fewer than ROUNDS: SPES's round is 20 AdamW steps of a mixture of
# experts on 4 workers (~6 s of CPU each); its first round trains, uploads and syncs
FEWER = {"spes": 1, "pretraining": 1}


def absent_data(record: Path) -> str | None:
    """The data folder the record read, where this machine lacks it (a shared data folder
    lives beside the checkout on the machines that have it)."""
    task = yaml.safe_load((record / "config.yaml").read_text()).get("task") or {}
    data_dir = task.get("data_dir")
    return data_dir if data_dir and not Path(data_dir).exists() else None


@pytest.mark.parametrize("family", sorted(RECORDS))
def test_a_committed_record_reruns_within_its_measured_tolerance(family, monkeypatch):
    record = ROOT / "experiments" / RECORDS[family]
    missing = absent_data(record)
    if missing:
        pytest.skip(f"{family}: the record reads {missing}, not on this machine")
    monkeypatch.chdir(ROOT)  # records name files relative to the repository root
    made_with = yaml.safe_load((record / "config.yaml").read_text()).get("torch_threads", 1)
    threads = 2 if made_with == 1 else 1
    # the records ran on CPUs with device auto, which picks a GPU where there is one
    found = rerun(record, FEWER.get(family, ROUNDS), None, device="cpu",
                  cpu_kernels=environment.cpu_kernels(), threads=threads)
    assert not found.mismatches, "\n".join(found.lines())
    assert found.compared > 0
    kept = find(record)
    # measured for the family, not the default
    assert Path(kept.source).resolve() == ROOT / "experiments" / family / FILE
    assert found.tolerance == kept.value > 0
    assert found.notes[0].startswith(("the record keeps no whole fingerprint",
                                      "fingerprint differs: ")), found.notes[0]
    assert found.notes[0].endswith(kept.says())


@pytest.mark.parametrize("family", sorted(RECORDS))
def test_a_tolerance_file_states_what_its_measurements_give(family):
    """Each file's tolerance is ten times the largest difference it keeps (at least the
    floor), and that largest is its measurements' own, each over the variants it ran."""
    kept = json.loads((ROOT / "experiments" / family / FILE).read_text())
    measurements = kept["measurements"]
    for m in measurements:
        assert m["largest_difference"] == max(v["largest_difference"] for v in m["variants"])
        assert len(m["variants"]) >= 2 and m["rounds"] >= 1 and m["how"]
    assert kept["largest_difference"] == max(m["largest_difference"] for m in measurements)
    assert kept["tolerance"] == stated(kept["largest_difference"])
