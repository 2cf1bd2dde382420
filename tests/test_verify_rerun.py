"""`decent verify --rerun`: a record's config run again reproduces its rows (exit 0), a
value edited in the record is named by round and field (exit 1), and every bad input is
one line (exit 2) with nothing left on disk."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from decent.core.errors import ConfigError
from decent.engine.config import from_dict
from decent.run.environment import KERNELS_VARIABLE, cpu_kernels
from decent.run.rerun import command_line, kernels_wanted, rerun
from decent.run.runner import run
from decent.tools.cli import main, parse
from tests.helpers import tiny


@pytest.fixture(scope="module")
def record(tmp_path_factory) -> Path:
    """A finished tiny run with what makes rows uneven: an evaluation every 2 rounds (and
    at the last), the starting model's, and a checkpoint on the way."""
    tmp = tmp_path_factory.mktemp("record")
    cfg = tiny(tmp, rounds=3, eval={"every": 2, "per_client": True, "initial": True},
               checkpoint={"every": 2})
    return run(from_dict(cfg)).run_dir


def scratch_folders() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("decent-rerun-*")}


def tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def test_a_record_reruns_equal_and_leaves_nothing_behind(record, capsys):
    before, folders = tree(record), scratch_folders()
    assert main(["verify", "--rerun", str(record)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[1].startswith("rerun ok: 3 rounds, "), lines
    assert lines[0] == f"rerun: ran with {cpu_kernels()} CPU kernels as the record was made"
    assert tree(record) == before and scratch_folders() == folders
    assert main(["verify", "--rerun", str(record), "--rounds", "1"]) == 0
    assert "\nrerun ok: 1 rounds, " in capsys.readouterr().out


def test_an_edited_value_is_named_by_round_and_field(record, tmp_path, capsys):
    edited = tmp_path / record.name
    shutil.copytree(record, edited)
    metrics = edited / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    rows[1]["gmp_accuracy"] += 0.001
    metrics.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    assert main(["verify", "--rerun", str(edited), "--rounds", "2"]) == 1
    lines = capsys.readouterr().out.splitlines()[1:]  # after the kernels' line
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"rerun: round 1, gmp_accuracy: recorded "
                               f"{rows[1]['gmp_accuracy']!r}, rerun ")
    assert "|diff| 0.001" in lines[0]
    assert lines[1].startswith("rerun differs: 1 of ")
    assert main(["verify", "--rerun", str(edited), "--rounds", "2",
                 "--tolerance", "0.01"]) == 0
    assert "within 0.01" in capsys.readouterr().out


def one_line_error(capsys, *argv: str) -> str:
    assert main(list(argv)) == 2
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    assert len(err) == 1 and not captured.out and "Traceback" not in captured.err, captured
    return err[0]


def test_bad_input_is_one_line(record, tmp_path, capsys):
    assert "is not a directory" in one_line_error(capsys, "verify", "--rerun",
                                                  str(tmp_path / "nowhere"))
    assert "not a run directory" in one_line_error(capsys, "verify", "--rerun",
                                                   str(tmp_path))
    for k in ("0", "4"):
        err = one_line_error(capsys, "verify", "--rerun", str(record), "--rounds", k)
        assert "--rounds: must be between 1 and 3, the rounds" in err and f"(got {k})" in err
    assert "--rounds goes with --rerun" in one_line_error(capsys, "verify", str(record),
                                                          "--rounds", "2")
    broken = tmp_path / "broken"
    shutil.copytree(record, broken)
    (broken / "config.yaml").write_text("rounds: [3\n")
    assert "is not valid YAML" in one_line_error(capsys, "verify", "--rerun", str(broken))
    config = yaml.safe_load((record / "config.yaml").read_text())
    config["task"] = {"name": "sst2", "data_dir": str(tmp_path / "absent")}
    (broken / "config.yaml").write_text(yaml.safe_dump(config))
    err = one_line_error(capsys, "verify", "--rerun", str(broken))
    assert f"task.data_dir: {tmp_path / 'absent'} is not on this machine" in err
    assert "--cpu-kernels: must be one of default, avx2, avx512" in one_line_error(
        capsys, "verify", "--rerun", str(record), "--cpu-kernels", "sse")
    assert "--cpu-kernels goes with --rerun" in one_line_error(
        capsys, "verify", str(record), "--cpu-kernels", "avx2")
    (broken / "metrics.jsonl").write_text('{"round": 1}\n')
    assert "line 1 is not the row of round 0" in one_line_error(
        capsys, "verify", "--rerun", str(broken))


def test_rows_compare_field_by_field():
    """Wall time is never compared; NaN equals NaN; a recorded field the re-run lacks
    differs; one only the re-run has is named, not compared; the worst gap is said last."""
    from decent.run.row_diff import HOST_FIELDS, Comparison

    found = Comparison(rounds=1, tolerance=0.0)
    recorded = {"round": 0, "loss": 0.5, "acc": float("nan"), "gone": 1, "wall_s": 1.0}
    found.add_rows(0, recorded, {"round": 0, "loss": 0.25, "acc": float("nan"),
                                 "new": 2, "wall_s": 9.0}, set(HOST_FIELDS))
    assert found.lines() == [
        "rerun: round 0, gone: recorded 1, rerun absent, |diff| n/a",
        "rerun: round 0, loss: recorded 0.5, rerun 0.25, |diff| 0.25",
        "rerun: not in the record, not compared: new",
        "rerun differs: 2 of 3 values over 1 rounds not equal; largest |diff| 0.25 "
        "(round 0, loss)"]


def test_a_record_keeps_its_cpu_kernels_and_a_rerun_uses_them(record, tmp_path, monkeypatch,
                                                               capsys):
    """Each stretch of a run records the CPU kernels torch ran (kernels sum in different
    orders); a re-run is made with the record's, in a new process where this one runs
    others, told by ATEN_CPU_CAPABILITY."""
    segments = json.loads((record / "segments.json").read_text())
    env = segments[0]["environment"]
    assert env["cpu_kernels"] == cpu_kernels() and env["torch"] and env["python"]
    assert kernels_wanted(record) == cpu_kernels()
    other = "default" if cpu_kernels() != "default" else "avx2"
    elsewhere = tmp_path / record.name
    shutil.copytree(record, elsewhere)
    segments[0]["environment"]["cpu_kernels"] = other
    (elsewhere / "segments.json").write_text(json.dumps(segments))
    assert kernels_wanted(elsewhere) == other
    assert kernels_wanted(elsewhere, "avx2") == "avx2"  # the user's choice wins
    planted = tmp_path / "planted"
    shutil.copytree(elsewhere, planted)
    segments[0]["environment"]["cpu_kernels"] = "avx2 --trust-imports"
    (planted / "segments.json").write_text(json.dumps(segments))
    with pytest.raises(ConfigError, match="records CPU kernels 'avx2 --trust-imports'"):
        kernels_wanted(planted)
    segments[0]["environment"]["cpu_kernels"] = other
    # in this process, which runs other kernels: refused, naming the variable to set
    monkeypatch.delenv(KERNELS_VARIABLE, raising=False)
    with pytest.raises(ConfigError, match=f"start it with {KERNELS_VARIABLE}={other}"):
        rerun(elsewhere, 1)
    # the CLI starts the new process, with the variable set and the same options
    started = {}

    def fake_run(argv, env):
        started.update(argv=argv, env=env)
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(subprocess, "run", fake_run)
    assert main(["verify", "--rerun", str(elsewhere), "--rounds", "2", "--device",
                 "cpu"]) == 0
    assert started["env"][KERNELS_VARIABLE] == other
    assert started["argv"][3:] == ["verify", str(elsewhere), "--rerun", "--cpu-kernels",
                                   other, "--rounds", "2", "--device", "cpu"]
    assert f"with {other} CPU kernels (this process runs {cpu_kernels()})" in (
        capsys.readouterr().out)
    again = parse(started["argv"][3:])  # the new process reads the same options
    assert command_line(again.run_dir, again.cpu_kernels, again.rounds, again.tolerance,
                        again.backend, again.device) == started["argv"][3:]
    # told to use kernels this CPU cannot run, torch runs its own: one line, no loop
    monkeypatch.setenv(KERNELS_VARIABLE, other)
    with pytest.raises(ConfigError, match=f"this CPU cannot run {other} kernels"):
        rerun(elsewhere, 1)
