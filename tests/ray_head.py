"""A throw-away single-node Ray cluster (``ray start --head``) for tests.

The head runs as a subprocess in its own process group, on free ports bound to
127.0.0.1 and with its own ``--temp-dir``, so that it can coexist with other Ray
instances on the same machine (an embedded Ray of the test process, other users'
clusters). It is stopped by signalling exactly the processes it started — never with
``ray stop``, which kills every Ray process on the machine.

Every process of the head also inherits a marker environment variable naming its temp
dir: that is how processes outside the head's process group (a job's driver runs in a
session of its own) are still recognised as ours at teardown.
"""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

MARKER = "DECENT_TEST_RAY_HEAD"

# Environment of the head (inherited by everything it starts, job drivers included) and
# of the `ray job ...` clients talking to it.
LOCAL_ENV = {
    # Without this Ray 2.60 binds to the machine's external interface.
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    # Token auth is on by default; server and client must agree on turning it off.
    "RAY_AUTH_MODE": "disabled",
    # On SIGTERM `ray start` first drains the node for up to 30 s (for Serve upgrades);
    # a throw-away test head has nothing to drain.
    "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
}

# Worker processes take ports from a contiguous range; keep it below the kernel's
# ephemeral range (32768+) so that outgoing connections cannot grab its ports.
WORKER_PORT_SPAN = 100
WORKER_PORT_LOW, WORKER_PORT_HIGH = 20000, 32000


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports the kernel reports free right now (all sockets are held
    open until every port is chosen, so the kernel cannot hand out the same one twice)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            s = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    return ports


def free_port_range(span: int = WORKER_PORT_SPAN) -> tuple[int, int]:
    """A random range of ``span`` consecutive ports that are all free right now."""
    rng = random.Random()
    for _ in range(200):
        low = rng.randrange(WORKER_PORT_LOW, WORKER_PORT_HIGH - span)
        if all(_port_free(p) for p in range(low, low + span)):
            return low, low + span - 1
    raise RuntimeError(f"no {span} consecutive free ports in [{WORKER_PORT_LOW}, "
                       f"{WORKER_PORT_HIGH})")


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The test process's environment made safe for Ray subprocesses.

    ``RAY_ADDRESS`` is dropped: the test process may itself host an embedded Ray whose
    address must not leak into the head or its jobs. The venv's ``bin`` is put first on
    ``PATH`` because a job's entrypoint (``decent run ...``) is resolved with the PATH of
    the head's processes."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(LOCAL_ENV)
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([venv_bin, env.get("PATH", "")])
    env.update(extra or {})
    return env


def ray_cli() -> str:
    """The ``ray`` console script installed next to this interpreter."""
    return str(Path(sys.executable).parent / "ray")


# Every port a head listens on besides the worker range, chosen together so they differ.
PORT_NAMES = ("port", "dashboard-port", "ray-client-server-port", "node-manager-port",
              "object-manager-port", "dashboard-agent-listen-port",
              "dashboard-agent-grpc-port", "runtime-env-agent-port", "metrics-export-port")


@dataclass
class RayHead:
    temp_dir: Path
    log_path: Path
    ports: dict[str, int] = field(
        default_factory=lambda: dict(zip(PORT_NAMES, free_ports(len(PORT_NAMES)), strict=True)))
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def dashboard_url(self) -> str:
        """Where ``ray job submit --address`` must point (the dashboard's HTTP server)."""
        return f"http://127.0.0.1:{self.ports['dashboard-port']}"

    @property
    def env(self) -> dict[str, str]:
        # TMPDIR too: the dashboard's multiprocessing helpers make /tmp/pymp-* dirs that
        # nothing removes when they are killed; inside the temp dir they go with it.
        return child_env({MARKER: str(self.temp_dir), "TMPDIR": str(self.temp_dir)})

    def start(self, num_cpus: int = 2, object_store_mb: int = 200,
              timeout_s: float = 120.0) -> None:
        """Start the head and wait until its job-submission API answers."""
        self.temp_dir.mkdir(parents=True, exist_ok=True)
        min_worker, max_worker = free_port_range()
        cmd = [
            ray_cli(), "start", "--head", "--block",
            "--node-ip-address=127.0.0.1",
            f"--temp-dir={self.temp_dir}",
            f"--num-cpus={num_cpus}",
            "--num-gpus=0",
            f"--object-store-memory={object_store_mb * 2**20}",
            "--include-dashboard=true",
            "--dashboard-host=127.0.0.1",
            *(f"--{name}={port}" for name, port in self.ports.items()),
            f"--min-worker-port={min_worker}",
            f"--max-worker-port={max_worker}",
            "--disable-usage-stats",
            "--log-style=record",
        ]
        with self.log_path.open("wb") as log:
            # Own session => own process group, which stop() signals as a whole.
            self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env=self.env,
                                            start_new_session=True)
        self._wait_ready(timeout_s)

    def _wait_ready(self, timeout_s: float) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        url = f"{self.dashboard_url}/api/version"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"ray start exited with {self.process.returncode}:\n"
                                   f"{self.log()}")
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"Ray head not ready after {timeout_s:.0f} s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]

    def owned_pids(self) -> list[int]:
        """Live processes belonging to this head.

        Three marks, because none catches everything: membership of the head's process
        group (most of Ray; processes retitled with setproctitle lose their original
        command line and environment), the temp dir on the command line, and the marker
        in the inherited environment (a job's driver runs in a session of its own)."""
        pgid = self.process.pid if self.process is not None else None
        marker = f"{MARKER}={self.temp_dir}".encode()
        needle = str(self.temp_dir).encode()
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                # Fields after the parenthesised command name: state, ppid, pgrp, ...
                state, _ppid, pgrp = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:3]
            except OSError:  # exited meanwhile
                continue
            # A zombie is already dead; it only awaits reaping by its (new) parent.
            if state == "Z":
                continue
            if int(pgrp) == pgid or needle in _read(entry / "cmdline") or \
                    marker in _read(entry / "environ").split(b"\0"):
                pids.append(int(entry.name))
        return pids

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM `ray start`, which stops its processes in order; then SIGKILL the
        process group and any other process of this head that is still alive."""
        if self.process is not None and self.process.poll() is None:
            # Only the leader: signalled together, the GCS would die first and the raylet
            # would wait for it to come back (up to a minute) before exiting.
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=grace_s)
        # Children may outlive `ray start` for a moment, and some (a job's driver) are
        # not in its process group: give them a moment, then kill what remains.
        deadline = time.monotonic() + 2
        while self.owned_pids() and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
        for pid in self.owned_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=5)
        deadline = time.monotonic() + 5
        while self.owned_pids() and time.monotonic() < deadline:
            time.sleep(0.1)


def _read(path: Path) -> bytes:
    """A /proc file's bytes, or nothing for a process that exited or is not ours to read."""
    try:
        return path.read_bytes()
    except OSError:
        return b""


@contextlib.contextmanager
def ray_head(log_dir: Path, num_cpus: int = 2, object_store_mb: int = 200) -> Iterator[RayHead]:
    """A started head, stopped (and every process of it gone) on exit."""
    # Short path: Ray's Unix socket paths live under it and have a ~107-byte limit.
    temp_dir = Path("/tmp") / f"rh{secrets.token_hex(4)}"
    head = RayHead(temp_dir, log_dir / "ray_head.log")
    try:
        head.start(num_cpus=num_cpus, object_store_mb=object_store_mb)
        yield head
    finally:
        head.stop()
        shutil.rmtree(temp_dir, ignore_errors=True)
