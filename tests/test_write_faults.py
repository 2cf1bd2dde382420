"""Write-path faults are one line, never a traceback, and lose nothing committed: a full
disk mid-checkpoint, a file-size limit reached mid-run (a real kernel EFBIG, in a child
process), a run directory removed or replaced under the run. Afterwards the last committed
checkpoint verifies and `decent resume` ends as the run that never stopped."""

from __future__ import annotations

import errno
import json
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from decent.engine.config import from_dict
from decent.run import checkpoint
from decent.run.runner import run
from decent.tools.cli import main
from tests.helpers import WrapsBackend, engine_for, tiny
from tests.test_checkpoint import steady


def failed_dir(out: Path) -> Path:
    (failed,) = out.glob("*.failed")
    return failed


def resume_equals(capsys, failed: Path, cfg: dict) -> None:
    """`decent resume` of ``failed`` ends with the rows of the run that never stopped."""
    assert main(["resume", str(failed)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    final = failed.with_name(failed.name[:-len(".failed")])
    reference = run(from_dict({**cfg, "tracking": {**cfg["tracking"],
                                                   "out_dir": str(failed.parent / "ref")}}))
    rows = [json.loads(line)
            for line in (final / "metrics.jsonl").read_text().splitlines()]
    assert steady(rows) == steady(reference.rows)


def test_a_full_disk_mid_checkpoint_is_one_line_and_loses_nothing(tmp_path, capsys,
                                                                   monkeypatch):
    """ENOSPC on the third file of the second checkpoint (at round 4): the run stops with
    one line naming that file, exit 2; the checkpoint of round 2 stays the committed one,
    the half-written folder is gone, and resuming (space back) gives the whole run."""
    cfg = tiny(tmp_path, rounds=6, checkpoint={"every": 2})
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    store = checkpoint.store
    calls = {"n": 0}

    def full_disk(target: Path, value):
        calls["n"] += 1
        if calls["n"] == 6 + 2 + 3:  # round 2's 6 clients, process, router; then 3 more
            raise OSError(errno.ENOSPC, "No space left on device", str(target))
        return store(target, value)

    monkeypatch.setattr(checkpoint, "store", full_disk)
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("error: file system: ") and "No space left on device" in err
    assert ".checkpoint-000004.tmp/clients/2.pt" in err
    failed = failed_dir(tmp_path / "runs")
    assert sorted(p.name for p in failed.iterdir() if p.name.startswith((".", "check"))) == [
        "checkpoint-000002", "checkpoint.json"]
    assert checkpoint.problems(failed, "checkpoint-000002") == []
    monkeypatch.setattr(checkpoint, "store", store)
    resume_equals(capsys, failed, cfg)


def limit_file_size(limit: int) -> None:
    # Python ignores SIGXFSZ, so a write past the limit fails with EFBIG (as a full disk
    # fails with ENOSPC) instead of killing the process
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def run_limited(tmp_path: Path, cfg: dict, limit: int) -> str:
    """`decent run` of ``cfg`` in a child whose files may not grow past ``limit`` bytes;
    its one line on stderr (exit 2 asserted)."""
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    decent = Path(sys.executable).parent / "decent"
    proc = subprocess.run([str(decent), "run", str(path)], capture_output=True, text=True,
                          preexec_fn=lambda: limit_file_size(limit),
                          cwd=Path(__file__).resolve().parents[1], timeout=300)
    err = proc.stderr.strip()
    assert proc.returncode == 2 and len(err.splitlines()) == 1, err
    return err


def test_a_file_size_limit_reached_mid_run_is_one_line(tmp_path, capsys):
    """A child `decent run` under RLIMIT_FSIZE=20 000 bytes: each checkpoint file (18 KB)
    fits, metrics.jsonl (~580 bytes a row) outgrows it near round 34. One line naming
    metrics.jsonl, exit 2; the checkpoint of round 30 verifies and the run resumes whole."""
    cfg = tiny(tmp_path, rounds=40, topology={"name": "ring", "n": 4},
               checkpoint={"every": 10}, eval={"every": 1, "per_client": True})
    err = run_limited(tmp_path, cfg, 20_000)
    assert "metrics.jsonl" in err and "File too large" in err, err
    failed = failed_dir(tmp_path / "runs")
    chosen, _ = checkpoint.select(failed)
    assert chosen.next_round == 30
    resume_equals(capsys, failed, cfg)


def test_a_checkpoint_file_past_the_size_limit_is_one_line_naming_it(tmp_path):
    """RLIMIT_FSIZE=10 000 bytes in a child: the first client file of the first checkpoint
    (18 KB) fails with a real EFBIG from the kernel; one line naming that file, exit 2,
    and no half-written checkpoint folder left."""
    cfg = tiny(tmp_path, rounds=3, topology={"name": "ring", "n": 4},
               checkpoint={"every": 2}, eval={"every": 1, "per_client": False})
    err = run_limited(tmp_path, cfg, 10_000)
    assert ".checkpoint-000002.tmp/clients/0.pt: File too large" in err, err
    failed = failed_dir(tmp_path / "runs")
    assert not list(failed.glob("*checkpoint*"))


class RemovesItsRunDir(WrapsBackend):
    """Before round ``round_``, removes the run's directory (and with ``replace``, puts an
    empty folder of the same name in its place)."""

    replace = False

    def run_round(self, r: int):
        if r == self.round:
            (partial,) = Path(self.backend.cfg.tracking.out_dir).glob(".*.partial")
            shutil.rmtree(partial)
            if self.replace:
                partial.mkdir()
        return self.backend.run_round(r)


@pytest.mark.parametrize("replace", [False, True])
def test_a_run_directory_removed_mid_run_stops_the_run_in_one_line(tmp_path, replace):
    cfg = from_dict(tiny(tmp_path, rounds=6, checkpoint={"every": 2}))
    engine = RemovesItsRunDir(engine_for(cfg), 3)
    engine.replace = replace
    with pytest.raises(OSError) as err:
        run(cfg, engine)
    what = "replaced by another folder" if replace else "removed"
    assert f"the run directory was {what} while the run wrote it" in str(err.value)
    runs = tmp_path / "runs"
    # nothing re-created half: no .failed, and a replacement folder is left as it was
    left = sorted(p.name for p in runs.iterdir())
    assert not any(name.endswith(".failed") for name in left)
    if replace:
        (partial,) = runs.glob(".*.partial")
        assert list(partial.iterdir()) == []
    else:
        assert left == []
