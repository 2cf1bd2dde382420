"""The embedded Ray dies with the driver that started it, however the driver dies.

``ray.init()`` without an address starts Ray's daemons as children of the driver. Ray
gives the head processes (gcs_server, raylet, the autoscaler monitor, the dashboard head,
the log monitor) ``PR_SET_PDEATHSIG``, so they die with the driver even on SIGKILL. The
rest it starts from the raylet does not share that fate. Measured on 2 cores, after
SIGKILLing ``decent run experiments/quickstart.yaml backend=ray`` mid-run (twice): the
ClientActor workers lived 2.3–2.5 s more (they poll the raylet), the DashboardAgent and
the RuntimeEnvAgent (~200 MB together) 60–61.5 s more. Both agents see the raylet's
death at once, but then report it through the GCS, which is dead, and that call waits
out its 60 s timeout before they exit.

:func:`watch` starts a watchdog process for the Ray this process has just started: a
small Python program in a session of its own (a kill of the driver's process group, or
Ctrl-C, leaves it running), whose stdin is the read end of a pipe whose only write end
the driver holds. The kernel closes that end when the driver dies, by any signal, so
the watchdog reads EOF at that moment, with no polling; it then SIGKILLs the session's
processes (measured the same way: all of them gone at the first look, 0.1 s after the
kill; the watchdog itself takes ~14 MB and logs to ``<session>/logs/decent_watchdog.log``).
It knows them three ways: every descendant of the driver's Ray children at :func:`watch`,
the descendants of those it finds every :data:`RESCAN_S` (the agents, workers and
whatever a worker starts), and, at the driver's death, every worker whose environment
names this session's raylet (``RAY_RAYLET_PID``), which covers workers started since the
last scan; once the raylet has died its children are re-parented and no tree leads to
them.

Why a watchdog rather than reaping at the next start: the next embedded start may come
much later or never, and until then ~200 MB stay taken; a record of PIDs read later also
has to guard against reused PIDs, where the watchdog holds each process by PID and start
time while the processes are still ours. What the watchdog cannot survive is its own
SIGKILL; Ray's own timeouts (above) then still end everything within a minute.

Only a Ray started by this process is ever watched: :func:`watch` looks for this
session's daemons among the driver's own children and does nothing if it finds none, so
a cluster joined by address, or a Ray another process started, is never touched."""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import psutil

# How often the watchdog looks for new descendants of the processes it knows: one pass
# reads /proc/<pid>/stat of every process, ~7 ms for ~90 processes measured on 2 cores,
# so ~0.4 % of one core. Workers started since the last pass are found at the driver's
# death by their environment, so this only bounds how young a grandchild (a process a
# worker started) or an agent may be and still be found.
RESCAN_S = 2.0

# A process's start time, as psutil reads it from /proc, is the same float every time it
# is read; the tolerance only absorbs its round trip through a command line.
_SAME_START_S = 0.01

_SESSION_FLAG = re.compile(r"--session[-_]dir=(\S+)")

_watchdog: subprocess.Popen[bytes] | None = None
_write_fd: int | None = None


def watch(session_dir: str | None = None) -> None:
    """Start watching the Ray that this process has just started with ``ray.init()``:
    if this process dies before :func:`stop`, every process of that Ray session is
    killed. ``session_dir`` (``/tmp/ray/session_...``) picks the session; by default it
    is the one named by this process's Ray children. Does nothing where this process
    has no such children (a Ray joined by address, or started by another process)."""
    stop()  # a watchdog of an earlier embedded Ray of this process
    if sys.platform == "win32":
        return  # select() on a pipe is POSIX only (Ray fate-shares with job objects there)
    me = psutil.Process()
    found = _ray_children(me, session_dir)
    if found is None:
        return
    session_dir, roots = found
    known = {p.pid: p for p in roots}
    _rescan(known)  # their descendants: the agents, the workers started so far
    specs = [spec for p in [me, *known.values()] if (spec := _spec(p))]
    read_fd, write_fd = os.pipe()  # both ends close on exec: no other program gets one
    log = _log_file(session_dir)
    # the watchdog imports this module by name: from this checkout, installed or not
    package_root = str(Path(__file__).resolve().parents[3])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [package_root, *filter(None, [os.environ.get("PYTHONPATH")])]))
    try:
        watchdog = subprocess.Popen(
            [sys.executable, "-m", __name__, session_dir, *specs],
            stdin=read_fd, stdout=subprocess.DEVNULL, stderr=log, env=env,
            start_new_session=True)
    except BaseException:
        os.close(write_fd)
        raise
    finally:
        os.close(read_fd)
        if not isinstance(log, int):
            log.close()
    global _watchdog, _write_fd
    _watchdog, _write_fd = watchdog, write_fd


def stop() -> None:
    """Stop the watchdog without it killing anything (before or after ``ray.shutdown()``;
    after is better: a driver killed while Ray shuts down still leaves nothing). Waits
    for it to exit, so none is left behind. Does nothing if none runs."""
    global _watchdog, _write_fd
    watchdog, write_fd = _watchdog, _write_fd
    _watchdog, _write_fd = None, None
    if write_fd is not None:
        # anything but EOF means the driver lives; BrokenPipeError: the watchdog is gone
        with contextlib.suppress(OSError):
            os.write(write_fd, b"stop\n")
        os.close(write_fd)
    if watchdog is not None:
        try:
            watchdog.wait(timeout=10)
        except subprocess.TimeoutExpired:
            watchdog.kill()
            watchdog.wait()


def _forget_in_child() -> None:
    # A fork of the driver would hold the write end too, and the watchdog would then see
    # no EOF until that child also died: the child drops it (the watchdog is not its own).
    global _watchdog, _write_fd
    if _write_fd is not None:
        os.close(_write_fd)
    _watchdog, _write_fd = None, None


os.register_at_fork(after_in_child=_forget_in_child)


def _session_of(proc: psutil.Process) -> str | None:
    try:
        found = _SESSION_FLAG.search(" ".join(proc.cmdline()))
    except psutil.Error:
        return None
    return found.group(1) if found else None


def _names_session(proc: psutil.Process, session_dir: str) -> bool:
    # as a flag's value (--session-dir=, --log_dir=<session>/logs, ...): Ray's daemons
    # name it so, where a `tail -f` of one of its logs would not
    try:
        return f"={session_dir}" in " ".join(proc.cmdline())
    except psutil.Error:
        return False


def _ray_children(me: psutil.Process, session_dir: str | None
                  ) -> tuple[str, list[psutil.Process]] | None:
    """The session directory of the Ray this process started, and its children of that
    session (gcs_server, raylet, the monitors: their command lines name it); None if
    it has none."""
    children = me.children()
    if session_dir is None:
        named = [p for p in children if _session_of(p)]
        if not named:
            return None
        # the newest session, should an earlier one of this process still be ending
        session_dir = _session_of(max(named, key=_started))
        if session_dir is None:
            return None
    ours = [child for child in children if _names_session(child, session_dir)]
    return (session_dir, ours) if ours else None


def _spec(proc: psutil.Process) -> str | None:
    """``pid:start_time``, how the watchdog is told of a process (None: gone already)."""
    try:
        return f"{proc.pid}:{proc.create_time()!r}"
    except psutil.Error:
        return None


def _started(proc: psutil.Process) -> float:
    try:
        return proc.create_time()
    except psutil.Error:
        return 0.0


def _log_file(session_dir: str) -> IO[bytes] | int:
    try:
        return open(os.path.join(session_dir, "logs", "decent_watchdog.log"), "ab")
    except OSError:
        return subprocess.DEVNULL


# ---- the watchdog process: python -m decent.backends.ray.embedded SESSION DRIVER PID... ----

def _held(spec: str) -> psutil.Process | None:
    """The process ``pid:start_time`` names, if it still runs (not a reused PID)."""
    pid, started = spec.split(":")
    try:
        proc = psutil.Process(int(pid))
        if abs(proc.create_time() - float(started)) < _SAME_START_S:
            return proc
    except psutil.Error:
        pass
    return None


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _rescan(known: dict[int, psutil.Process]) -> None:
    """Adds the live descendants of the live processes in ``known`` and drops the dead
    (a long run's restarted workers would pile up): one pass over the process table."""
    for pid in [pid for pid, p in known.items() if not _alive(p)]:
        del known[pid]
    parent_of: dict[int, int] = {}
    for proc in psutil.process_iter(["ppid"]):
        parent_of[proc.pid] = proc.info["ppid"]
    children: dict[int, list[int]] = {}
    for pid, ppid in parent_of.items():
        children.setdefault(ppid, []).append(pid)
    todo = list(known)
    while todo:
        for pid in children.get(todo.pop(), []):
            if pid not in known:
                try:
                    known[pid] = psutil.Process(pid)
                except psutil.Error:
                    continue
                todo.append(pid)


def _workers_of(raylet: psutil.Process, session_dir: str) -> list[psutil.Process]:
    """Processes that name this session's raylet in their environment (Ray's workers
    carry ``RAY_RAYLET_PID``) or this session's directory in their command line. A PID
    is reused only by a process started later, so a worker counts only if it started
    after the raylet did and the raylet's PID has not gone to another process since."""
    born = raylet.create_time()  # psutil read it when it took hold of the raylet
    try:
        if psutil.Process(raylet.pid).create_time() != born:
            return []  # the raylet's PID is another process's now: nothing to match by
    except psutil.NoSuchProcess:
        pass
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.create_time() < born:
                continue
            if (proc.environ().get("RAY_RAYLET_PID") == str(raylet.pid)
                    or _names_session(proc, session_dir)):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _say(text: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} decent watchdog {os.getpid()}: {text}",
          file=sys.stderr, flush=True)


def _kill_session(known: dict[int, psutil.Process], raylets: list[psutil.Process],
                  session_dir: str) -> list[str]:
    """SIGKILL every process of the session still alive; raylet first, so that it
    starts no worker meanwhile. What was killed, as ``name(pid)``."""
    killed: list[str] = []
    for _ in range(3):  # again while a pass finds one alive: one may have started late
        _rescan(known)
        for raylet in raylets:
            for proc in _workers_of(raylet, session_dir):
                known.setdefault(proc.pid, proc)
        targets = sorted((p for p in known.values() if _alive(p) and p.pid != os.getpid()),
                         key=lambda p: _name(p) != "raylet")
        if not targets:
            break
        for proc in targets:
            try:
                proc.kill()  # psutil checks the PID still names the same process
                killed.append(f"{_name(proc)}({proc.pid})")
            except psutil.Error:
                continue
        _wait_gone(targets, timeout=2.0)
    return killed


def _wait_gone(procs: list[psutil.Process], timeout: float) -> None:
    # not psutil.wait_procs: these are not our children, and one killed stays a zombie
    # until its new parent reaps it, which wait_procs would count as running
    deadline = time.monotonic() + timeout
    while any(_alive(p) for p in procs) and time.monotonic() < deadline:
        time.sleep(0.05)


def _name(proc: psutil.Process) -> str:
    try:
        return proc.name()
    except psutil.Error:
        return "?"


def main(argv: list[str]) -> int:
    """The watchdog: stdin is the pipe, ``argv`` the session directory, then the driver
    and the session's processes as ``pid:start_time``."""
    session_dir, driver_spec, *specs = argv
    # Ctrl-C reaches the driver's session only, but an interrupt sent here by hand must
    # not end the watch; a SIGTERM ends it, killing nothing
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    driver = _held(driver_spec)
    known = {p.pid: p for p in map(_held, specs) if p is not None}
    # kept apart: the raylet dies with the driver, and the workers name its PID after
    raylets = [p for p in known.values() if _name(p) == "raylet"]
    _say(f"watching {session_dir}: {len(known)} processes of driver {driver_spec}")
    while True:
        ready, _, _ = select.select([0], [], [], RESCAN_S)
        if not ready:
            _rescan(known)
            continue
        if os.read(0, 64):  # stop(): the driver lives on and shuts its Ray down itself
            _say("stopped by the driver")
            return 0
        break
    # EOF: every copy of the write end is closed. That is the driver's death, unless
    # something in it closed the descriptor: then wait for the death itself.
    waited = 0.0
    while driver is not None and _alive(driver):
        time.sleep(0.2)
        waited += 0.2
        if waited >= RESCAN_S:
            _rescan(known)
            waited = 0.0
    killed = _kill_session(known, raylets, session_dir)
    _say(f"driver died; killed {', '.join(killed) or 'nothing (all gone already)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
