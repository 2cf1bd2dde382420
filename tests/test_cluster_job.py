"""The cluster path: `ray job submit` of a `decent run` to a Ray head, and the launcher config.

The job test runs the README's single-machine dry run exactly as written (head start,
wait, job submit, stop), so the runtime environment file, the working-dir upload, the
console script on the cluster and the driver's connection via ``RAY_ADDRESS`` are all
exercised. Only subprocesses touch Ray: the test process may host an embedded Ray of
other tests, which must be left alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from decent.models.mlp import MLPConfig, build_mlp, num_parameters

REPO_ROOT = Path(__file__).resolve().parents[1]
JOB_TIMEOUT_S = 300
LEFTOVER_GRACE_S = 15

# the README block's run: experiments/quickstart.yaml (ring of 16) with rounds=10
ROUNDS, N = 10, 16


def ring_dsgd_bytes(rounds: int, n: int, d: int) -> int:
    """DSGD on a ring: each round every client sends its float32 model to its 2 neighbours."""
    return rounds * 2 * n * 4 * d


# Inherited by every process the README block starts (the head, its workers, the job's
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
    """The first ```bash block after ``heading`` in the README, verbatim."""
    text = (REPO_ROOT / "README.md").read_text()
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


@pytest.mark.slow  # a Ray head, a job and its teardown, end to end (~20 s)
def test_readme_dry_run_works_as_written(tmp_path: Path) -> None:
    """The README's "Dry run on one machine" block, run by bash exactly as written, in a
    copy of the checkout: the head starts, the job waits for it, `decent run` runs on it
    as a Ray job, and the block stops its own head. Anything of it still alive is then
    killed by marker, never by `ray stop`."""
    block = readme_block("### Dry run on one machine")
    for port in (8265, 6379):
        if not port_free(port):
            pytest.skip(f"port {port} is in use on this machine; the README block uses it")
    repo = checkout_copy(tmp_path / "checkout")
    marker = secrets.token_hex(6)
    temp_dir = Path("/tmp/decent-ray")
    had_temp_dir = temp_dir.exists()
    # (the drain on SIGTERM serves Ray Serve upgrades; a dry run has nothing to drain)
    env = child_env({MARKER: marker, "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"})
    for key in ("RAY_AUTH_MODE", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "VIRTUAL_ENV"):
        env.pop(key, None)  # the block sets these itself
    # output to files, not pipes: a head the block failed to stop would hold a pipe open
    out_path, err_path = tmp_path / "block.out", tmp_path / "block.err"
    try:
        with out_path.open("w") as out, err_path.open("w") as err:
            done = subprocess.run(["bash", "-e", "-c", block], cwd=repo, env=env, stdout=out,
                                  stderr=err, timeout=JOB_TIMEOUT_S, start_new_session=True)
    finally:
        # Ray's daemons exit a moment after `ray start --block` does; give them that moment
        deadline = time.monotonic() + LEFTOVER_GRACE_S
        while (leftovers := marked_pids(marker)) and time.monotonic() < deadline:
            time.sleep(0.5)
        described = {pid: cmdline(pid) for pid in leftovers}
        for pid in leftovers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if not had_temp_dir:
            shutil.rmtree(temp_dir, ignore_errors=True)
    stdout, stderr = out_path.read_text(), err_path.read_text()
    logs = f"{stdout[-4000:]}\n{stderr[-4000:]}"
    assert done.returncode == 0, logs
    assert re.search(r"Job 'raysubmit_\w+' succeeded", stdout + stderr), logs
    assert leftovers == [], f"the block's `kill $HEAD_PID` left {described} alive"

    runs = list((repo / "runs").iterdir())
    assert len(runs) == 1 and runs[0].is_dir(), runs
    summary: dict[str, Any] = json.loads((runs[0] / "summary.json").read_text())
    assert summary["backend"] == "ray"
    assert summary["rounds"] == ROUNDS
    assert summary["clients"] == N
    d = num_parameters(build_mlp(MLPConfig(), {"input_dim": 64, "num_classes": 10}))
    assert summary["bytes_total"] == ring_dsgd_bytes(ROUNDS, N, d)
    assert len((runs[0] / "metrics.jsonl").read_text().splitlines()) == ROUNDS


def in_session(session: int) -> list[int]:
    """Live processes of session ``session``, zombies aside."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[3]) == session:
            pids.append(int(entry.name))
    return pids


@pytest.mark.slow  # a head, two worker nodes the autoscaler adds, a job (~45 s)
def test_readme_autoscaling_cluster_works_as_written(tmp_path: Path) -> None:
    """The README's "An autoscaling cluster on one machine" block, run by bash exactly as
    written in a copy of the checkout: the autoscaler adds a worker node for each 1-CPU
    actor (the head has no CPUs), the run spans both, and the block's teardown leaves no
    process of its session alive (what is left is killed, and named)."""
    block = readme_block("### An autoscaling cluster on one machine")
    for port in (6390, 6392, 8275):
        if not port_free(port):
            pytest.skip(f"port {port} is in use on this machine; the README block uses it")
    repo = checkout_copy(tmp_path / "checkout")
    temp_dir = Path("/tmp/decent-fake-cluster")
    had_temp_dir = temp_dir.exists()
    env = child_env({"RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"})
    for key in ("RAY_AUTH_MODE", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "VIRTUAL_ENV"):
        env.pop(key, None)  # the block sets these itself
    out_path = tmp_path / "block.out"
    with out_path.open("w") as out:
        # a session of its own: every process the block starts is found by it
        block_run = subprocess.Popen(["bash", "-e", "-c", block], cwd=repo, env=env,
                                     stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True)
    try:
        code = block_run.wait(timeout=JOB_TIMEOUT_S)
    finally:
        block_run.kill()
        deadline = time.monotonic() + LEFTOVER_GRACE_S
        while (leftovers := in_session(block_run.pid)) and time.monotonic() < deadline:
            time.sleep(0.5)
        described = {pid: cmdline(pid) for pid in leftovers}
        for pid in leftovers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if not had_temp_dir:
            shutil.rmtree(temp_dir, ignore_errors=True)
    logs = out_path.read_text()[-6000:]
    assert code == 0, logs
    assert re.search(r"Job 'raysubmit_\w+' succeeded", logs), logs
    assert leftovers == [], f"the block's teardown left {described} alive"
    (run_dir,) = (repo / "runs").iterdir()
    summary: dict[str, Any] = json.loads((run_dir / "summary.json").read_text())
    assert summary["rounds"] == 3 and summary["ray_actors"] == 2
    # two actors of one CPU each, on a head with none: a node was added for each
    assert summary["ray_nodes"] == 2
    assert len({a["node"] for a in summary["ray_actor_nodes"].values()}) == 2


def test_runtime_env_excludes_bulky_paths() -> None:
    env = yaml.safe_load((REPO_ROOT / "runtime_env.yaml").read_text())
    excludes = set(env["excludes"])
    for pattern in (".venv", ".git", "**/__pycache__", "/runs", "/wandb", "*.egg-info"):
        assert pattern in excludes, pattern
    # The command line's --working-dir is the one source of the working dir.
    assert "working_dir" not in env


def test_working_dir_package_is_small(tmp_path: Path) -> None:
    """Zip the repository the way `ray job submit --working-dir` does (Ray's own packaging
    code, .gitignore ignored so that runtime_env.yaml's excludes alone must suffice)."""
    from zipfile import ZipFile

    from ray._private.runtime_env.packaging import create_package

    excludes = yaml.safe_load((REPO_ROOT / "runtime_env.yaml").read_text())["excludes"]
    package = tmp_path / "working_dir.zip"
    create_package(str(REPO_ROOT), package, include_gitignore=False, excludes=excludes)
    names = ZipFile(package).namelist()
    assert "decent/tools/cli.py" in names
    assert "experiments/quickstart.yaml" in names
    assert "runtime_env.yaml" in names
    assert not [n for n in names if n.startswith((".venv/", ".git/", "runs/", "wandb/"))
                or "__pycache__" in n or ".egg-info/" in n]
    # Ray refuses 100 MiB; source and configs are a few hundred KiB.
    assert package.stat().st_size < 5 * 2**20


def test_cluster_config_parses() -> None:
    cfg = yaml.safe_load((REPO_ROOT / "cluster.yaml").read_text())
    assert cfg["provider"]["type"]
    node_types: dict[str, Any] = cfg["available_node_types"]
    assert cfg["head_node_type"] in node_types
    workers = {name: t for name, t in node_types.items() if name != cfg["head_node_type"]}
    assert workers, "no worker node type"
    assert any(t["resources"].get("GPU", 0) >= 1 for t in workers.values()), "no GPU workers"
    for t in workers.values():
        assert 0 <= t["min_workers"] <= t["max_workers"]
    assert cfg["max_workers"] >= max(t["max_workers"] for t in workers.values())
    setup = "\n".join(cfg["setup_commands"])
    assert "pip install -e ~/decent" in setup
    assert "~/decent" in cfg["file_mounts"]
    assert any("ray start --head" in c for c in cfg["head_start_ray_commands"])
    assert any("ray start" in c and "--address" in c for c in cfg["worker_start_ray_commands"])
