"""The cluster guide's blocks (docs/guides/cluster.md), run by bash exactly as written in
a copy of the checkout, for tests/test_cluster_job.py: the single-machine dry run, the
autoscaling cluster on one machine; the dry run beside a second Ray on Ray's
default ports (started here, or whatever already holds them). A background job of the
suite (tests/background.py): each block's exit code, output, the processes it left alive
(killed, and named) and the runs it wrote, and what the second Ray saw, to
``OUT_DIR/result.json``.

    python -m tests.cluster_guide_blocks OUT_DIR
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.background import REPO_ROOT, run_main
from tests.helpers import in_session

JOB_TIMEOUT_S = 300
LEFTOVER_GRACE_S = 15
OTHER_START_TIMEOUT_S = 90

DRY_RUN = "### Dry run on one machine"
AUTOSCALING = "### An autoscaling cluster on one machine"
# Ray's defaults, which the guide's blocks must not need: GCS, job API (dashboard), Ray
# Client server, dashboard agent
GCS, JOB_API, CLIENT, AGENT = 6379, 8265, 10001, 52365


# Inherited by every process the guide's block starts (the head, its workers, the job's
# driver, which runs in a session of its own): how the test finds what is left of it.
MARKER = "DECENT_TEST_RAY_HEAD"


def child_env(extra: dict[str, str]) -> dict[str, str]:
    """The test process's environment made safe for a Ray subprocess: without
    ``RAY_ADDRESS`` (the test process may host an embedded Ray whose address must not
    leak into the head or its job), without Ray's usage statistics."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    env.update(extra)
    return env


def readme_block(heading: str) -> str:
    """The first ```bash block after ``heading`` in the cluster guide, verbatim."""
    text = (REPO_ROOT / "docs" / "guides" / "cluster.md").read_text()
    after = text[text.index(heading):]
    start = after.index("```bash\n") + len("```bash\n")
    return after[start: after.index("```", start)]


def checkout_copy(dest: Path) -> Path:
    """The files of this checkout (tracked, and untracked but not ignored) in ``dest``,
    with ``.venv`` linked to the environment running the tests."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=REPO_ROOT, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = REPO_ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    (dest / ".venv").symlink_to(Path(sys.prefix))
    return dest


def marked_pids(marker: str) -> list[int]:
    """Live processes that inherited ``DECENT_TEST_RAY_HEAD=marker`` (the block's head,
    its workers and the job's driver), zombies aside."""
    needle = f"{MARKER}={marker}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def cmdline(pid: int) -> str:
    try:
        raw = (Path("/proc") / str(pid) / "cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace")[:200]


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def stop_what_is_left(session: int, marker: str) -> dict[str, str]:
    """What is left of session ``session`` and of the processes that inherited ``marker``
    (a job's driver runs in a session of its own), given ``LEFTOVER_GRACE_S`` to go, then
    killed: their command lines by pid."""
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    while True:
        leftovers = sorted(set(in_session(session)) | set(marked_pids(marker)))
        if not leftovers or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    described = {str(pid): cmdline(pid) for pid in leftovers}
    for pid in leftovers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return described


def run_block(heading: str, temp_dir: Path, out: Path) -> dict[str, Any]:
    """The block under ``heading``, run in a copy of the checkout in ``out``, in a session
    of its own; then what is left of it, killed and named (``stop_what_is_left``). The
    block picks its own ports: none is checked here."""
    block = readme_block(heading)
    repo = checkout_copy(out / "checkout")
    marker = secrets.token_hex(6)
    had_temp_dir = temp_dir.exists()
    # (the drain on SIGTERM serves Ray Serve upgrades; a dry run has nothing to drain)
    env = child_env({MARKER: marker, "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"})
    for key in ("RAY_AUTH_MODE", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "VIRTUAL_ENV"):
        env.pop(key, None)  # the block sets these itself
    # output to a file, not a pipe: a head the block failed to stop would hold a pipe open
    log = out / "block.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(["bash", "-e", "-c", block], cwd=repo, env=env, stdout=sink,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        code = proc.wait(timeout=JOB_TIMEOUT_S)
    finally:
        proc.kill()
        described = stop_what_is_left(proc.pid, marker)
        if not had_temp_dir:
            shutil.rmtree(temp_dir, ignore_errors=True)
    runs = [{"summary": json.loads((d / "summary.json").read_text()),
             "rows": len((d / "metrics.jsonl").read_text().splitlines())}
            for d in sorted((repo / "runs").iterdir()) if (d / "summary.json").is_file()] \
        if (repo / "runs").is_dir() else []
    return {"code": code, "logs": log.read_text()[-6000:], "leftovers": described,
            "runs": runs, "checkout": str(repo)}


def jobs_at(port: int) -> list[str] | None:
    """The entrypoints of the jobs the job API on ``port`` knows, or None if no job API
    answers there (Ray's REST route, read with urllib: this process hosts no Ray)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/jobs/", timeout=10) as r:
            return [job["entrypoint"] for job in json.loads(r.read())]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_other_ray(temp_dir: Path, log: Path, marker: str) -> subprocess.Popen:
    """A second Ray head on Ray's default GCS and job API ports (and its default Ray Client
    and agent ports where free), in a session of its own, once its job API answers. With
    as many CPUs as the dry run's head, so that a job sent to it by mistake would run and
    show in its job list rather than hang."""
    ports = [f"--port={GCS}", f"--dashboard-port={JOB_API}",
             f"--ray-client-server-port={CLIENT if port_free(CLIENT) else free_port()}",
             f"--dashboard-agent-listen-port={AGENT if port_free(AGENT) else 0}"]
    env = child_env({MARKER: marker, "RAY_AUTH_MODE": "disabled",
                     "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
                     "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"})
    with log.open("w") as sink:
        proc = subprocess.Popen([str(Path(sys.prefix) / "bin" / "ray"), "start", "--head",
                                 "--block", "--num-cpus=2", "--include-dashboard=true",
                                 *ports, f"--temp-dir={temp_dir}"], env=env, stdout=sink,
                                stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + OTHER_START_TIMEOUT_S
    while jobs_at(JOB_API) is None:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            stop_what_is_left(proc.pid, marker)
            raise RuntimeError(f"the second Ray did not start: {log.read_text()[-3000:]}")
        time.sleep(1)
    return proc


def beside_another_ray(out: Path) -> dict[str, Any]:
    """The dry run with a second Ray on this machine on Ray's default ports — where the
    block once sent its job — started here if they are free; if something already holds
    them, that is the second Ray. Then what the second one saw: its job list (the
    entrypoints, None if no job API answers on 8265), the job drivers it logged, whether
    it still ran after the block, and, if started here, what was left of it once
    stopped (by its own session only)."""
    out.mkdir(parents=True, exist_ok=True)
    started = port_free(GCS) and port_free(JOB_API)
    other = None
    # a short path: Ray's socket paths under it must fit in 107 bytes
    temp_dir = Path(tempfile.mkdtemp(prefix="decent-other-ray-"))
    marker = secrets.token_hex(6)
    try:
        if started:
            other = start_other_ray(temp_dir, out / "other-ray.log", marker)
        found = run_block(DRY_RUN, Path("/tmp/decent-ray"), out)
        found["other"] = {
            "started": started,
            "jobs": jobs_at(JOB_API),
            "drivers": sorted(p.name for p in temp_dir.glob("session_*/logs/job-driver-*")),
            "alive_after": other.poll() is None if other else None,
        }
    finally:
        if other:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(other.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                other.wait(timeout=30)
            left = stop_what_is_left(other.pid, marker)
        shutil.rmtree(temp_dir, ignore_errors=True)
    if other:
        found["other"]["leftovers"] = left
    return found


def main(out: Path) -> dict[str, Any]:
    # the dry run once, beside a second Ray: the block as written, and what it leaves of
    # another Ray on this machine (a run of its own would repeat the same block's ~35 s)
    return {
        "autoscaling": run_block(AUTOSCALING, Path("/tmp/decent-fake-cluster"),
                                 out / "autoscaling"),
        "beside_another_ray": beside_another_ray(out / "beside-another-ray"),
    }


if __name__ == "__main__":
    run_main(main)
