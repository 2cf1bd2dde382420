"""Ctrl-C stops a run in one line naming the round and the exact resume command, exit code
130, no traceback; the run directory stays resumable (`.<id>.partial`, not failed), and
resuming it gives the rows of the run that never stopped, also when it stopped before its
first checkpoint. A second Ctrl-C while the run cleans up is quiet too."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from decent.engine.config import from_dict
from decent.run.runner import run
from decent.run.stops import MARK, RunInterrupted
from decent.tools import stopped
from decent.tools.cli import main
from tests.helpers import WrapsBackend, engine_for, tiny

# DSGD that, in the round PACED_WAIT_ROUND names, touches PACED_WAITING and waits there:
# the moment the test presses Ctrl-C, the same on every machine. Unset (the runs this
# process makes), it is DSGD.
PACED = '''
import os
import time
from dataclasses import dataclass
from pathlib import Path

from decent.strategies.dsgd import DSGD, DSGDConfig
from decent.strategies.registry import STRATEGIES


@dataclass
class Config(DSGDConfig):
    name: str = "paced"


class Paced(DSGD):
    name, Config = "paced", Config

    def local(self, client, inbox, ctx):
        if client.cid == 0 and ctx.round == int(os.environ.get("PACED_WAIT_ROUND", -1)):
            Path(os.environ["PACED_WAITING"]).touch()
            time.sleep(120)
        return super().local(client, inbox, ctx)


STRATEGIES.register(Paced.name, Config, Paced)
'''

LINE = re.compile(r"interrupted at round (\d+) of (\d+): resume with  (decent resume .+?)  "
                  r"\((.+)\)")


def steady(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "round_wall_s"} for r in rows]


def rows_of(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def never_stopped(cfg: dict, tmp_path: Path) -> list[dict]:
    """The rows of ``cfg`` run to its end, in a folder of its own."""
    alone = {**cfg, "tracking": {**cfg["tracking"], "out_dir": str(tmp_path / "ref")}}
    return steady(run(from_dict(alone)).rows)


def resume_as_said(command: str) -> Path:
    """Run the resume command a line gave (in this process); the finished directory."""
    argv = shlex.split(command)
    assert argv[:2] == ["decent", "resume"]
    assert main(argv[1:]) == 0
    partial = Path(argv[2])
    return partial.parent / partial.name[1:-len(".partial")]


def test_ctrl_c_stops_a_run_in_one_line_and_resume_gives_the_uninterrupted_rows(folder,
                                                                                capsys):
    (folder / "paced.py").write_text(PACED)
    cfg = tiny(folder, rounds=6, imports=[str(folder / "paced.py")], checkpoint={"every": 2},
               strategy={"name": "paced", "local_steps": 2, "batch_size": 8, "lr": 0.1})
    (folder / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    waiting = folder / "waiting"
    decent = Path(sys.executable).parent / "decent"
    # a session of its own, signalled as a terminal's Ctrl-C signals its foreground group;
    # SIGINT's default disposition first, as a terminal gives it (a process inherits an
    # ignored SIGINT, and Python then never raises KeyboardInterrupt)
    reset = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
             "os.execv(sys.argv[1], sys.argv[1:])")
    proc = subprocess.Popen([sys.executable, "-c", reset, str(decent), "run", "cfg.yaml"],
                            cwd=folder, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True,
                            env={**os.environ, "PACED_WAIT_ROUND": "3",
                                 "PACED_WAITING": str(waiting)})
    try:
        # bounds a hang only: a loaded 2-core machine once took over 60 s to get there
        deadline = time.monotonic() + 240
        while not waiting.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the run never reached round 3"
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:  # what it said, for what held it up
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"still running 60 s after Ctrl-C: {out[-1500:]}"
                                 f"{err[-1500:]}") from None
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    said = LINE.fullmatch(err.strip())
    assert said is not None, err
    assert said.group(1, 2, 4) == ("3", "6", "from its checkpoint at round 2")
    # the exact command, --trust-imports included: the run's own config imports a file
    assert said.group(3).endswith(" --trust-imports")
    partial = Path(shlex.split(said.group(3))[2])
    assert partial.name.startswith(".") and partial.name.endswith(".partial")
    assert [p.name for p in (folder / "runs").iterdir()] == [partial.name]  # not .failed
    assert json.loads((partial / MARK).read_text())["round"] == 3

    final = resume_as_said(said.group(3))
    assert steady(rows_of(final)) == never_stopped(cfg, folder)
    assert not (final / MARK).exists()
    summary = json.loads((final / "summary.json").read_text())
    assert len(summary["segments_wall_s"]) == 2


class CtrlC(WrapsBackend):
    """Ctrl-C in round ``round_``; with ``again``, a second one while the engine closes."""

    again = False

    def run_round(self, r: int):
        if r == self.round:
            raise KeyboardInterrupt
        return self.backend.run_round(r)

    def close(self) -> None:
        self.backend.close()
        if self.again:
            raise KeyboardInterrupt


def test_before_the_first_checkpoint_resume_runs_it_again_from_round_zero(tmp_path, capsys):
    cfg = tiny(tmp_path, rounds=4)  # checkpoint.every: 0, no checkpoint ever
    with pytest.raises(RunInterrupted) as stop:
        run(from_dict(cfg), CtrlC(engine_for(from_dict(cfg)), 2))
    said = LINE.fullmatch(stop.value.line)
    assert said is not None, stop.value.line
    assert said.group(1, 2, 4) == ("2", "4", "no checkpoint yet: it runs again from round 0")
    final = resume_as_said(said.group(3))
    assert steady(rows_of(final)) == never_stopped(cfg, tmp_path)


def test_a_second_ctrl_c_while_the_run_cleans_up_is_one_line_too(tmp_path, capsys):
    cfg = from_dict(tiny(tmp_path, rounds=4, checkpoint={"every": 1}))
    engine = CtrlC(engine_for(cfg), 2)
    engine.again = True
    with pytest.raises(KeyboardInterrupt) as stop:
        run(cfg, engine)
    assert not isinstance(stop.value, RunInterrupted)  # the second cut the cleanup short
    assert stopped.said(stop.value) == 130
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    said = LINE.fullmatch(err)
    assert said is not None and said.group(1, 4) == ("2", "from its checkpoint at round 2")
    partial = Path(shlex.split(said.group(3))[2])
    assert partial.is_dir() and partial.name.endswith(".partial")


@pytest.mark.parametrize("how", ["clean", "cut short", "escaped"])
def test_the_command_ends_quietly_after_ctrl_c(monkeypatch, capsys, how):
    """Once the line is out, Ctrl-C is ignored; where a second one cut the cleanup short
    (or came while main said the first), the process ends without Python's exit handlers:
    they would go on with a half-stopped Ray, which its watchdog takes down instead."""
    ignored, ended = [], []
    monkeypatch.setattr(signal, "signal", lambda sig, how: ignored.append((sig, how)))
    monkeypatch.setattr(os, "_exit", lambda code: ended.append(code))
    monkeypatch.setattr(stopped, "SAID", stopped.Said())
    first = RunInterrupted("interrupted at round 1 of 2: resume with  decent resume x")
    second = KeyboardInterrupt()
    second.__context__ = first  # how Python chains a Ctrl-C raised while one is handled

    def main() -> int:
        if how == "escaped":
            raise second
        return stopped.said(first if how == "clean" else second)

    with pytest.raises(SystemExit) as done:
        stopped.finish(main)
    assert done.value.code == 130
    assert ignored == [(signal.SIGINT, signal.SIG_IGN)]
    assert ended == ([] if how == "clean" else [130])
    assert capsys.readouterr().err == first.line + "\n"

