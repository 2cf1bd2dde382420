"""`decent verify --rerun`: a record's config run again reproduces its rows (exit 0), a
value edited in the record is named by round and field (exit 1), and every bad input is
one line (exit 2) with nothing left on disk."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
import yaml

from decent.core.errors import ConfigError
from decent.engine.config import from_dict
from decent.run.environment import FINGERPRINT, KERNELS_VARIABLE, cpu_info, cpu_kernels
from decent.run.rerun import command_line, kernels_wanted, rerun
from decent.run.runner import run
from decent.run.tolerance import DEFAULT, FILE, FLOOR, find, stated, write
from decent.run.tolerance_measure import other_kernels
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


@pytest.fixture(autouse=True)
def own_temp_dir(tmp_path, monkeypatch):
    """Each test's re-runs make their scratch folders in a temp dir of its own: another
    worker's re-run, in the machine's, is not one this test left behind."""
    own = tmp_path / "tmp"
    own.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(own))


def scratch_folders() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("decent-rerun-*")}


def tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def test_a_record_reruns_equal_and_leaves_nothing_behind(record, capsys):
    before, folders = tree(record), scratch_folders()
    assert main(["verify", "--rerun", str(record)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and lines[2].startswith("rerun ok: 3 rounds, "), lines
    assert lines[0] == "rerun: fingerprint matches the record's: every value exactly"
    assert lines[1] == f"rerun: ran with {cpu_kernels()} CPU kernels as the record was made"
    assert "floats" not in lines[2]  # every value equal, none within a tolerance
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
    lines = capsys.readouterr().out.splitlines()[2:]  # after the fingerprint's and kernels'
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
    assert "--threads: must be a whole number ≥ 1 (got 0)" in one_line_error(
        capsys, "verify", "--rerun", str(record), "--threads", "0")
    for flags in (["--threads", "2"], ["--measure-tolerance"]):
        assert f"{flags[0]} goes with --rerun" in one_line_error(capsys, "verify",
                                                                 str(record), *flags)
    assert "--tolerance does not go with --measure-tolerance" in one_line_error(
        capsys, "verify", "--rerun", str(record), "--measure-tolerance", "--tolerance", "1")
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


def planted(record: Path, folder: Path, env_edit=None, row_edit=None) -> Path:
    """A copy of ``record`` in ``folder`` with its first stretch's environment and its
    round-1 row edited (``env_edit(env)``, ``row_edit(row)``, in place)."""
    copy = folder / record.name
    shutil.copytree(record, copy)
    segments = json.loads((copy / "segments.json").read_text())
    if env_edit is not None:
        env_edit(segments[0])
    (copy / "segments.json").write_text(json.dumps(segments))
    metrics = copy / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    if row_edit is not None:
        row_edit(rows[1])
    metrics.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    return copy


def nudge(row: dict) -> None:
    """A float moved in its last bits, as another CPU would move it (2e-9 of it)."""
    row["loss"] *= 1 + 2e-9


def test_a_fingerprint_kept_whole_names_what_decides_the_arithmetic(record):
    env = json.loads((record / "segments.json").read_text())[0]["environment"]
    assert set(FINGERPRINT) <= env.keys()
    assert env["intra_op_threads"] == 1  # the config's torch_threads, not the shell's
    assert env["device"] == "cpu" and env["cpu_kernels"] == cpu_kernels()
    assert env["cpu_model"] and env["torch_build"] and env["numpy_blas"]
    model, flags = cpu_info("processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu avx2 "
                            "avx512f ht avx512_bf16\n\nprocessor\t: 1\nmodel name\t: Other\n")
    assert (model, flags) == ("Some CPU", ["avx2", "avx512f", "avx512_bf16"])


def test_where_the_fingerprint_matches_every_value_is_exact(record, tmp_path, capsys):
    """The same arithmetic: a float 2e-9 away is a difference, named."""
    moved = planted(record, tmp_path, row_edit=nudge)
    assert main(["verify", "--rerun", str(moved), "--rounds", "2"]) == 1
    out = capsys.readouterr().out
    assert "fingerprint matches" in out and "round 1, loss: recorded" in out


def test_another_machine_holds_floats_to_the_measured_tolerance_and_the_rest_exactly(
        record, tmp_path, capsys):
    """A fingerprint that differs (another CPU model, faked) is named with both values;
    a float in its last bits passes within the tolerance found beside the record (the
    default where there is none), a byte that moves never does."""
    def elsewhere(segment: dict) -> None:
        segment["environment"]["cpu_model"] = "Another CPU"

    moved = planted(record, tmp_path / "a", elsewhere, nudge)
    assert main(["verify", "--rerun", str(moved), "--rounds", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    here = cpu_info()[0]
    assert lines[0] == (f"rerun: fingerprint differs: cpu_model ('Another CPU' here "
                        f"{here!r}); integers and the clock exactly, floats within "
                        f"{DEFAULT:g} (no {FILE} beside the record: the default; "
                        "--measure-tolerance measures one)")
    assert lines[-1].startswith("rerun ok: 2 rounds, ") and "largest difference 2e-09, " \
        "round 1, loss)" in lines[-1]
    # a tolerance file beside the record (in a folder above it) is the one used
    (tmp_path / "a" / FILE).write_text(json.dumps({"tolerance": 1e-9,
                                                   "largest_difference": 1e-10}))
    assert main(["verify", "--rerun", str(moved), "--rounds", "2"]) == 1
    out = capsys.readouterr().out
    assert f"floats within 1e-09 ({tmp_path / 'a' / FILE}: largest difference measured " \
        "1e-10)" in out and "round 1, loss: recorded" in out

    def one_byte_more(row: dict) -> None:
        row["bytes"] += 1

    counted = planted(record, tmp_path / "b", elsewhere, one_byte_more)
    assert main(["verify", "--rerun", str(counted), "--rounds", "2"]) == 1
    assert "round 1, bytes: recorded" in capsys.readouterr().out


def test_a_record_without_a_whole_fingerprint_is_never_held_to_exactness(record, tmp_path,
                                                                          capsys):
    """Made before the fingerprint was kept (its versions and kernels only): compared
    within its tolerance, whatever this machine is."""
    def before(segment: dict) -> None:
        segment["environment"] = {k: segment["environment"][k]
                                  for k in ("python", "machine", "cpu_kernels", "torch")}

    old = planted(record, tmp_path, before, nudge)
    assert main(["verify", "--rerun", str(old), "--rounds", "2"]) == 0
    assert "rerun: the record keeps no whole fingerprint (made before it was kept); " \
        "integers and the clock exactly, floats within" in capsys.readouterr().out


def test_another_thread_count_is_the_other_machine_check_on_this_one(record, capsys):
    """--threads 2 splits the record's sums another way: its fingerprint differs in the
    thread count, and the rows hold within the tolerance; this process's thread count is
    back as it was after."""
    before = torch.get_num_threads()
    assert main(["verify", "--rerun", str(record), "--threads", "2"]) == 0
    assert torch.get_num_threads() == before
    out = capsys.readouterr().out
    assert "rerun: fingerprint differs: intra_op_threads (1 here 2); " in out
    assert "\nrerun ok: 3 rounds, " in out


def test_the_same_machine_reproduces_whatever_threads_the_shell_asks_for(tmp_path):
    """A run sets its own thread count (torch_threads): two runs of one config, one from a
    shell with OMP_NUM_THREADS=1 and one with 2, write the same rows bit for bit and the
    same fingerprint."""
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(tiny(tmp_path, rounds=2)))
    made = []
    for threads in ("1", "2"):
        env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
        subprocess.run([sys.executable, "-c", "from decent.tools.cli import entry; entry()",
                        "run", str(config)],
                       env=env, check=True, capture_output=True, cwd=tmp_path)
        made.append(max((tmp_path / "runs").iterdir(), key=lambda p: p.stat().st_mtime_ns))
    rows = [[{k: v for k, v in json.loads(line).items() if k != "round_wall_s"}
             for line in (d / "metrics.jsonl").read_text().splitlines()] for d in made]
    assert rows[0] == rows[1] and len(rows[0]) == 2
    envs = [json.loads((d / "segments.json").read_text())[0]["environment"] for d in made]
    assert {k: envs[0][k] for k in FINGERPRINT} == {k: envs[1][k] for k in FINGERPRINT}


def test_a_measured_tolerance_is_kept_beside_the_record_with_how_it_was_measured(
        record, tmp_path, capsys):
    """--measure-tolerance re-runs the record with another thread count and the other
    kernel sets this CPU runs; the file states ten times the largest difference (at least
    the floor), keeps each measurement, and a re-run elsewhere then uses it."""
    folder = tmp_path / "family"
    folder.mkdir()
    copy = folder / record.name
    shutil.copytree(record, copy)
    assert main(["verify", "--rerun", str(copy), "--rounds", "2", "--measure-tolerance"]) == 0
    out = capsys.readouterr().out
    kept = json.loads((folder / FILE).read_text())
    (measured,) = kept["measurements"]
    variants = measured["variants"]
    assert {(v["cpu_kernels"], v["intra_op_threads"]) for v in variants} == {
        (cpu_kernels(), 1), (cpu_kernels(), 2), *((k, 1) for k in other_kernels(cpu_kernels()))}
    assert variants[0]["largest_difference"] == 0.0  # this machine, the record's threads
    largest = max(v["largest_difference"] for v in variants)
    assert measured["largest_difference"] == kept["largest_difference"] == largest
    assert kept["tolerance"] == stated(largest) >= max(FLOOR, 10 * largest)
    assert measured["rounds"] == 2 and measured["record"] == record.name  # from the file
    assert f"measure: {folder / FILE}: tolerance {kept['tolerance']:g}" in out
    # measured into a folder higher up: its file names the record from there, and the
    # nearest file is the one a re-run takes
    assert main(["verify", "--rerun", str(copy), "--rounds", "1", "--measure-tolerance",
                 "--into", str(tmp_path)]) == 0
    capsys.readouterr()
    above = json.loads((tmp_path / FILE).read_text())
    assert above["measurements"][0]["record"] == f"family/{record.name}"
    assert find(copy).source == str(folder / FILE)
    assert find(tmp_path / "elsewhere" / "run").source == str(tmp_path / FILE)
    assert "--into: " in one_line_error(capsys, "verify", "--rerun", str(copy),
                                        "--measure-tolerance", "--into", str(tmp_path / "x"))


def test_a_tolerance_file_keeps_every_measurement_and_states_the_largest(tmp_path):
    """A second machine's measurement is added to the file; the tolerance follows the
    largest of all it keeps, whichever came first."""
    def one(largest: float) -> dict:
        return {"largest_difference": largest, "variants": []}

    write(tmp_path, one(3e-7))
    kept = write(tmp_path, one(2e-8))
    assert [m["largest_difference"] for m in kept["measurements"]] == [3e-7, 2e-8]
    assert kept["largest_difference"] == 3e-7 and kept["tolerance"] == stated(3e-7) == 3e-6
    assert json.loads((tmp_path / FILE).read_text()) == kept
    assert find(tmp_path / "run").value == 3e-6


def test_stated_tolerances_are_ten_times_the_measurement_rounded_up():
    assert stated(0.0) == stated(2.3e-8) == FLOOR
    assert stated(2.3e-7) == 3e-6 and stated(1.7e-5) == 2e-4 and stated(1e-4) == 1e-3
