"""Checks that mostly wait on Ray's daemons (a multi-node cluster, the cluster guide's
blocks), run in processes of their own. Under pytest-xdist the controller starts each one
whose test file the session runs in the background as the session begins
(tests/conftest.py); the workers inherit where it writes, and its test file, run last,
reads what it found. Without xdist, the file's fixture runs it there and then.

A job is a module ``tests.<name>`` whose ``main(out)`` returns its findings (JSON); run as
``python -m tests.<name> OUT`` it writes them to ``OUT/result.json`` (whole, or not at
all), or its error to ``OUT/failed.txt``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULT, FAILED = "result.json", "failed.txt"
# each job, and the test file that reads it
JOBS = {"cluster_bed": "test_multinode.py", "cluster_guide_blocks": "test_cluster_job.py"}
TIMEOUT_S = 900


def env_key(job: str) -> str:
    """The variable naming where the session's background ``job`` writes."""
    return f"DECENT_TEST_{job.upper()}_DIR"


def start(job: str, out: Path) -> subprocess.Popen:
    """``job`` in the background, in a session of its own, writing to ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    with (out / "job.log").open("w") as log:
        return subprocess.Popen([sys.executable, "-m", f"tests.{job}", str(out)], stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                cwd=REPO_ROOT)


def result(out: Path, timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
    """What the job writing to ``out`` found, once it has (AssertionError if it failed)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (out / RESULT).is_file():
            return json.loads((out / RESULT).read_text())
        if (out / FAILED).is_file():
            raise AssertionError((out / FAILED).read_text()[-3000:])
        time.sleep(0.5)
    raise AssertionError(f"{out} holds no findings after {timeout_s:g} s: "
                         f"{(out / 'job.log').read_text()[-3000:]}")


def findings(job: str, out: Path) -> dict[str, Any]:
    """For a test file's fixture: what the session's background ``job`` found, or what
    it finds now, run in ``out`` (no background job: no xdist, or not started)."""
    started = os.environ.get(env_key(job))
    if started:
        return result(Path(started))
    proc = start(job, out)
    try:
        return result(out)
    finally:
        proc.wait(timeout=60)


def run_main(main: Callable[[Path], dict[str, Any]]) -> None:
    """``python -m tests.<job> OUT``: ``main(OUT)``'s findings to ``OUT/result.json``."""
    out = Path(sys.argv[1])
    try:
        found = main(out)
    except BaseException:
        (out / FAILED).write_text(traceback.format_exc())
        raise
    done = out / f".{RESULT}"
    done.write_text(json.dumps(found))
    done.replace(out / RESULT)
