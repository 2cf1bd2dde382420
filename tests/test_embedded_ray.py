"""An embedded Ray dies with its driver (:mod:`decent.backends.ray.embedded`).

Each test runs a driver in a child Python that starts Ray as ``connect()`` does, then
watches it; the test kills or ends that driver and looks at what is left of its Ray."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]

# A driver as decent's connect() starts one (same ray.init arguments: all the cores, no
# dashboard, the default 512 MiB object store, calls inline up to 1 MiB), then watched.
# To be killed, it starts a worker after watch(), as a run's ClientActors are, so the
# watchdog must find processes it was not told about. MODE: "kill" waits to be killed, "join" joins
# the Ray at ADDRESS instead of starting one, "clean" shuts Ray down and stops watching.
DRIVER = """
import json, os, sys, time
import ray
from decent.backends.ray import embedded

mode = sys.argv[1]
if mode == "join":
    ray.init(address=sys.argv[2])
else:
    ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False,
             object_store_memory=512 * 2**20,
             _system_config={"max_direct_call_object_size": 1 << 20})
embedded.watch()

@ray.remote(num_cpus=0)
class Host:
    def pid(self):
        return os.getpid()

host = Host.remote() if mode == "kill" else None  # kept: the actor lives while it does
worker = ray.get(host.pid.remote()) if host is not None else None
print(json.dumps({"watchdog": None if embedded._watchdog is None else embedded._watchdog.pid,
                  "worker": worker, "address": ray.get_runtime_context().gcs_address}),
      flush=True)
if mode == "clean":
    sys.stdin.readline()  # the test has looked at the session's processes
    ray.shutdown()
    embedded.stop()
else:
    time.sleep(300)
"""

# Ray's usual local settings, as connect() sets them (tests/conftest.py sets them too)
LOCAL_RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0",
                 "RAY_AUTH_MODE": "disabled"}

# Without the watchdog, after a SIGKILL of `decent run experiments/quickstart.yaml
# backend=ray` on 2 cores (twice): the head daemons died at once, the ClientActor workers
# after 2.3–2.5 s, the DashboardAgent and RuntimeEnvAgent after 60–61.5 s. With it, every
# process was gone at the first look, 0.1 s after the kill (in this test too: 0.1 s). 2 s
# leaves room for a loaded machine; with watch() left out, this test finds both agents
# still alive then.
GONE_WITHIN_S = 2.0


def start_driver(mode: str, *args: str) -> tuple[subprocess.Popen[str], dict]:
    """A driver in a session of its own (as a shell job would be) and what it printed."""
    env = dict(os.environ, **LOCAL_RAY_ENV)
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, mode, *args], cwd=REPO, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.kill()
        raise AssertionError(f"driver ({mode}) printed nothing; exit code {proc.wait()}")
    return proc, json.loads(line)


def alive(proc: psutil.Process) -> bool:
    try:  # a zombie holds no memory: it only waits for its new parent to reap it
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def ray_processes(driver: subprocess.Popen[str], watchdog: int | None
                  ) -> list[psutil.Process]:
    """The processes of the driver's Ray session: its descendants (but the watchdog),
    and whatever else names the session directory (before any of them retitles)."""
    tree = [p for p in psutil.Process(driver.pid).children(recursive=True)
            if p.pid != watchdog]
    sessions = {s for p in tree if (s := session_of(p))}
    assert len(sessions) == 1, sessions
    session = sessions.pop()
    found = {p.pid: p for p in tree}
    for proc in psutil.process_iter():
        try:
            if session in " ".join(proc.cmdline()):
                found.setdefault(proc.pid, proc)
        except psutil.Error:
            continue
    return list(found.values())


def session_of(proc: psutil.Process) -> str | None:
    """The session directory a Ray daemon's command line names."""
    try:
        found = re.search(r"--session[-_]dir=(\S+)", " ".join(proc.cmdline()))
    except psutil.Error:
        return None
    return found.group(1) if found else None


def kill_leftovers(procs: list[psutil.Process]) -> None:
    """So that a failing test leaves no Ray behind (psutil checks each PID is the same
    process)."""
    for proc in procs:
        if alive(proc):
            with contextlib.suppress(psutil.Error):
                proc.kill()


def describe(procs: list[psutil.Process]) -> list[str]:
    out = []
    for proc in procs:
        try:
            out.append(f"{proc.name()}({proc.pid})")
        except psutil.Error:
            continue
    return out


def test_sigkilled_driver_takes_its_ray_along_but_never_a_joined_one() -> None:
    """SIGKILL a driver that started and watches Ray: within GONE_WITHIN_S (2 s; measured
    0.1 s, against 60 s for Ray's agents without the watchdog) no process of its Ray
    session is alive, the worker started after watch() included, and the watchdog has
    exited. Before that, a second driver that joined this Ray by address and called
    watch() too is SIGKILLed: it started no watchdog, and the Ray lives on."""
    driver, info = start_driver("kill")
    joined: subprocess.Popen[str] | None = None
    procs: list[psutil.Process] = []
    try:
        procs = ray_processes(driver, info["watchdog"])
        assert info["watchdog"] is not None
        watchdog = psutil.Process(info["watchdog"])
        names_before = describe(procs)
        assert len(names_before) == len(procs)
        label = {p.pid: n for p, n in zip(procs, names_before, strict=True)}
        assert {"raylet", "gcs_server", "ray::DashboardAgent", "ray::RuntimeEnvAgent",
                "ray::Host"} <= {n.split("(")[0] for n in names_before}, names_before
        assert info["worker"] in {p.pid for p in procs}, "the worker is the driver's Ray's"

        joined, joined_info = start_driver("join", info["address"])
        assert joined_info["watchdog"] is None  # not a Ray this driver started
        assert not [p for p in psutil.Process(joined.pid).children(recursive=True)
                    if "embedded" in " ".join(p.cmdline())]
        os.killpg(joined.pid, signal.SIGKILL)
        joined.wait()
        time.sleep(0.5)  # a watchdog acts within 0.1 s (measured above)
        # all but idle workers, which the raylet ends by itself beyond one per CPU
        lasting = [p for p in procs if not label[p.pid].startswith("ray::IDLE")]
        assert all(alive(p) for p in lasting), [label[p.pid] for p in lasting if not alive(p)]

        # the driver alone, as `kill -9 $!` or the OOM killer would: the agents (in the
        # driver's process group) and the workers (each in a group of its own) survive
        # that without the watchdog. A kill of the driver's process group would not take
        # the watchdog either: it is in a session of its own.
        assert os.getsid(watchdog.pid) != os.getsid(driver.pid)
        killed_at = time.monotonic()
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        while time.monotonic() - killed_at < GONE_WITHIN_S:
            if not any(alive(p) for p in procs) and not alive(watchdog):
                break
            time.sleep(0.05)
        left = [p for p in procs if alive(p)]
        assert not left, f"alive {GONE_WITHIN_S} s after the driver's death: {describe(left)}"
        assert not alive(watchdog)
    finally:
        for proc in (driver, joined):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        kill_leftovers(procs)


def test_clean_shutdown_leaves_no_watchdog() -> None:
    """ray.shutdown() then stop(): the watchdog exits at once, killing nothing (its log in
    the session directory says so), and nothing of the session is left."""
    driver, info = start_driver("clean")
    watchdog = info["watchdog"]
    assert watchdog is not None
    procs: list[psutil.Process] = []
    try:
        procs = ray_processes(driver, watchdog)
        session = next(s for p in procs if (s := session_of(p)))
        assert driver.stdin is not None
        driver.stdin.write("\n")
        driver.stdin.close()
        assert driver.wait(timeout=60) == 0
        assert not psutil.pid_exists(watchdog) or not alive(psutil.Process(watchdog))
        log = (Path(session) / "logs" / "decent_watchdog.log").read_text()
        assert "stopped by the driver" in log and "killed" not in log, log
        left = [p for p in procs if alive(p)]
        assert not left, describe(left)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        kill_leftovers(procs)
