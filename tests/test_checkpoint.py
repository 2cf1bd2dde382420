"""Checkpoints and `decent resume`: a resumed run is the run that never stopped, bit for
bit, on both backends, also after a SIGKILL of the driver; bad resumes are one line."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from decent.engine.config import from_dict
from decent.run import checkpoint
from decent.run.runner import resume, run
from decent.strategies.registry import STRATEGIES
from decent.tools.cli import main
from tests.helpers import STAR_METHODS, method_config, run_capturing, tiny

VOLATILE = {"round_wall_s"}


with_vectors = run_capturing


def steady(rows):
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in rows]


def stopped_copy(run_dir: Path) -> Path:
    """The run directory as a run killed after its last row would have left it (rows past
    the last checkpoint included: resuming must run those rounds again)."""
    partial = run_dir.parent / f".{run_dir.name}-killed.partial"
    shutil.copytree(run_dir, partial)
    (partial / "summary.json").unlink()
    return partial


def config(tmp_path, name, **extra):
    strategy = {}
    if name == "seedflood":  # delayed flooding and subspace refreshes across the checkpoint
        strategy.update(hops=1, refresh_every=2)
    if name == "spes":  # merges across the checkpoint
        strategy.update(merge_warmup_steps=10, merge_every=2, merge_top_k=2)
    if name == "dso":  # asynchronous: gradients still being computed across the checkpoint
        strategy.update(asynchronous=True)
        extra.setdefault("compute", {"speeds": [1.0, 1.0, 0.5, 0.3, 1.0, 0.4]})
    return method_config(tmp_path, name, 5 if name in STAR_METHODS else 6, rounds=6,
                         strategy=strategy, checkpoint={"every": 2}, **extra)


@pytest.mark.parametrize("name", STRATEGIES.names)
def test_a_resumed_run_is_the_run_that_never_stopped(tmp_path, name):
    # late messages cross the checkpoint; a replaying Byzantine client keeps a history
    cfg = from_dict(config(tmp_path, name, faults={
        "delay": 0.5, "delay_phases": 2, "byzantine": [1], "attack": {"name": "replay"}}))
    full, full_vectors = with_vectors(run, cfg, cfg)
    assert json.loads((full.run_dir / "checkpoint.json").read_text())["next_round"] == 4
    resumed, vectors = with_vectors(resume, cfg, stopped_copy(full.run_dir))
    assert steady(resumed.rows) == steady(full.rows)
    assert len(resumed.rows) == 6
    for cid, vec in full_vectors.items():
        np.testing.assert_array_equal(vectors[cid], vec)
    written = [json.loads(line) for line in
               (resumed.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steady(written) == steady(full.rows)  # the rows past the checkpoint, once
    assert resumed.run_dir.name == full.run_dir.name + "-killed"


def test_resume_on_ray_equals_the_local_run(tmp_path, ray_session):
    base = config(tmp_path, "dsgd", faults={"delay": 0.5, "delay_phases": 2})
    local, local_vectors = with_vectors(run, from_dict(base), from_dict(base))
    ray_cfg = from_dict({**base, "backend": "ray", "ray": {"clients_per_actor": 6}})
    on_ray = run(ray_cfg)
    resumed, vectors = with_vectors(resume, ray_cfg, stopped_copy(on_ray.run_dir))
    assert steady(resumed.rows) == steady(local.rows)
    for cid, vec in local_vectors.items():
        np.testing.assert_array_equal(vectors[cid], vec)


def test_shared_frozen_weights_are_stored_once(tmp_path):
    cfg = from_dict(config(tmp_path, "seedflood", model={"name": "mlp", "hidden": [64]}))
    result = run(cfg)
    folder = result.run_dir / "checkpoint-000004"
    process = torch.load(folder / "process.pt", weights_only=False)
    weights = {name for name in process["base"] if name.endswith("weight")}
    assert len(weights) == 2  # the MLP's two Linear weights, folded into at refreshes
    for cid in range(6):
        client = torch.load(folder / "clients" / f"{cid}.pt", weights_only=False)
        # a SubCGE client holds its 1-D tensors (and its r×r buffers, in its state)
        assert set(client["model"]) == {n for n in process["base"] if n.endswith("bias")}


@pytest.fixture()
def killed_run(tmp_path):
    """A `decent run` in a subprocess, SIGKILLed after its second checkpoint."""
    cfg = tiny(tmp_path, rounds=120, topology={"name": "ring", "n": 8},
               checkpoint={"every": 5}, eval={"every": 1, "per_client": True})
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    decent = Path(sys.executable).parent / "decent"
    proc = subprocess.Popen([str(decent), "run", str(path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd=Path(__file__).resolve().parents[1])
    runs = tmp_path / "runs"
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            partial = next(runs.glob(".*.partial"), None) if runs.exists() else None
            pointer = None if partial is None else partial / "checkpoint.json"
            if pointer is not None and pointer.is_file() and \
                    json.loads(pointer.read_text())["next_round"] >= 10:
                break
            assert proc.poll() is None, "the run ended before it could be killed"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    return cfg, partial


def test_resume_after_a_sigkill_of_the_driver(tmp_path, killed_run, capsys):
    cfg, partial = killed_run
    assert main(["resume", str(partial)]) == 0
    out = capsys.readouterr().out
    final = partial.parent / partial.name[1:-len(".partial")]
    assert f"run directory: {final}" in out
    rows = [json.loads(line) for line in (final / "metrics.jsonl").read_text().splitlines()]
    reference = run(from_dict({**cfg, "tracking": {**cfg["tracking"],
                                                   "out_dir": str(partial.parent / "ref")}}))
    assert steady(rows) == steady(reference.rows)
    # the summary's wall time is the whole run's: the killed segment (up to its last
    # round) and the resumed one
    summary = json.loads((final / "summary.json").read_text())
    walls = summary["segments_wall_s"]
    assert len(walls) == 2 and all(w > 0 for w in walls)
    assert summary["wall_s"] == pytest.approx(sum(walls))
    assert summary["restarts"] == 0
    assert "  per segment" in out


def run_cli(capsys, *argv: str) -> str:
    code = main(list(argv))
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_bad_resumes_are_one_line_and_change_nothing(tmp_path, capsys):
    cfg = from_dict(tiny(tmp_path, rounds=4, checkpoint={"every": 2}))
    finished = run(cfg).run_dir
    assert "finished run" in run_cli(capsys, "resume", str(finished))
    assert "not a directory" in run_cli(capsys, "resume", str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    assert "no config.yaml" in run_cli(capsys, "resume", str(tmp_path / "empty"))
    no_checkpoint = run(from_dict(tiny(tmp_path, rounds=2))).run_dir
    plain = stopped_copy(no_checkpoint)
    assert "no checkpoint" in run_cli(capsys, "resume", str(plain))
    other = stopped_copy(finished)
    pointer = json.loads((other / "checkpoint.json").read_text())
    (other / "checkpoint.json").write_text(json.dumps({**pointer, "format": 0}))
    before = sorted(p.relative_to(other) for p in other.rglob("*"))
    assert "another version" in run_cli(capsys, "resume", str(other))
    assert sorted(p.relative_to(other) for p in other.rglob("*")) == before
    assert other.exists() and not (other.parent / other.name[1:-len(".partial")]).exists()


def test_a_checkpoint_is_complete_before_it_is_named(tmp_path):
    cfg = from_dict(tiny(tmp_path, rounds=7, checkpoint={"every": 2}))
    run_dir = run(cfg).run_dir
    # the newest checkpoint.keep (2) are kept, and the pointer names the newest
    assert sorted(p.name for p in run_dir.glob("checkpoint-*")) == [
        "checkpoint-000004", "checkpoint-000006"]
    chosen, info = checkpoint.select(run_dir)
    assert info["next_round"] == chosen.next_round == 6
    assert chosen.manifest["metric_rows"] == 6
    state = checkpoint.read(chosen)
    assert sorted(state["clients"]) == list(range(6))


def test_a_resumed_run_with_churn_is_the_run_that_never_stopped(tmp_path):
    """Clients leave, crash and join on both sides of the checkpoint (a joiner after it is
    bootstrapped from models restored from it)."""
    cfg = from_dict(tiny(tmp_path, rounds=8, topology={"name": "ring", "n": 8},
                         checkpoint={"every": 3}, churn={
                             "leave_rate": 0.15, "join_rate": 0.4, "absent": [6],
                             "events": [{"round": 2, "client": 1, "kind": "crash"}]}))
    full, full_vectors = with_vectors(run, cfg, cfg)
    assert len({r["live_clients"] for r in full.rows}) > 1
    resumed, vectors = with_vectors(resume, cfg, stopped_copy(full.run_dir))
    assert steady(resumed.rows) == steady(full.rows)
    for cid, vec in full_vectors.items():
        np.testing.assert_array_equal(vectors[cid], vec)
