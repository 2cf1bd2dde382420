"""The cluster guide's blocks (docs/guides/cluster.md), run by bash exactly as written in
a copy of the checkout, for tests/test_cluster_job.py: the single-machine dry run and the
autoscaling cluster on one machine. A background job of the suite (tests/background.py):
each block's exit code, output, the processes it left alive (killed, and named) and the
runs it wrote, to ``OUT_DIR/result.json``.

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
import time
from pathlib import Path
from typing import Any

from tests.background import REPO_ROOT, run_main
from tests.helpers import in_session

JOB_TIMEOUT_S = 300
LEFTOVER_GRACE_S = 15


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


def run_block(heading: str, ports: tuple[int, ...], temp_dir: Path, out: Path
              ) -> dict[str, Any]:
    """The block under ``heading``, run in a copy of the checkout in ``out``, in a session
    of its own; then what is left of it — its session's processes and those that
    inherited its marker (a job's driver runs in a session of its own) — given
    ``LEFTOVER_GRACE_S`` to go, killed and named. ``{"skipped": why}`` if a port it uses
    is taken (by another Ray on this machine)."""
    block = readme_block(heading)
    for port in ports:
        if not port_free(port):
            return {"skipped": f"port {port} is in use on this machine; the guide's block "
                               "uses it"}
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
        deadline = time.monotonic() + LEFTOVER_GRACE_S
        while True:
            leftovers = sorted(set(in_session(proc.pid)) | set(marked_pids(marker)))
            if not leftovers or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        described = {str(pid): cmdline(pid) for pid in leftovers}
        for pid in leftovers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if not had_temp_dir:
            shutil.rmtree(temp_dir, ignore_errors=True)
    runs = [{"summary": json.loads((d / "summary.json").read_text()),
             "rows": len((d / "metrics.jsonl").read_text().splitlines())}
            for d in sorted((repo / "runs").iterdir()) if (d / "summary.json").is_file()] \
        if (repo / "runs").is_dir() else []
    return {"code": code, "logs": log.read_text()[-6000:], "leftovers": described,
            "runs": runs}


def main(out: Path) -> dict[str, Any]:
    return {
        "dry_run": run_block("### Dry run on one machine", (8265, 6379),
                             Path("/tmp/decent-ray"), out / "dry-run"),
        "autoscaling": run_block("### An autoscaling cluster on one machine",
                                 (6390, 6392, 8275), Path("/tmp/decent-fake-cluster"),
                                 out / "autoscaling"),
    }


if __name__ == "__main__":
    run_main(main)
