"""Run directories that appear whole or not at all.

A run writes into ``<out_dir>/.<id>.partial`` and is renamed to ``<out_dir>/<id>`` when it
finishes; a run that raises is renamed to ``<id>.failed`` (its metrics so far kept for
debugging), and one stopped by Ctrl-C stays ``.<id>.partial``, to resume. Bad input is
refused before the directory is created. A directory removed or replaced while the run
writes it stops the run with one line (never re-created half)."""

from __future__ import annotations

import errno
import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

from decent.core.errors import ConfigError


def check_out_dir(out_dir: str | Path) -> None:
    """Refuse, before anything is built, an ``out_dir`` that cannot hold run directories:
    a file, or a folder (or the nearest existing parent of one to create) that is not
    writable."""
    path = Path(out_dir).expanduser()
    if path.exists() and not path.is_dir():
        raise ConfigError("tracking.out_dir", f"{path} is a file; runs are written into a "
                          "folder: give a folder path")
    parent = path
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError("tracking.out_dir", f"{parent} is a file, so {path} cannot be "
                          "created; give a folder path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError("tracking.out_dir", f"{parent} is not writable; give a folder you "
                          "can write to")


class RunDir:
    def __init__(self, out_dir: str | Path, name: str) -> None:
        self.out_dir = Path(out_dir)
        self.run_id = f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
        self.final = self.out_dir / self.run_id
        self.path = self.out_dir / f".{self.run_id}.partial"
        self.resumed = False

    @classmethod
    def existing(cls, path: Path) -> RunDir:
        """The unfinished run in ``path`` (``.<id>.partial`` of a run that was killed,
        ``<id>.failed`` of one that raised), to continue; one line for anything else."""
        path = path.expanduser()
        if not path.is_dir():
            raise ConfigError("run_dir", f"{path} is not a directory")
        if not (path / "config.yaml").is_file():
            raise ConfigError("run_dir", f"{path} is not a run directory (no config.yaml)")
        name = path.name
        if name.startswith(".") and name.endswith(".partial"):
            run_id = name[1:-len(".partial")]
        elif name.endswith(".failed"):
            run_id = name[:-len(".failed")]
        else:
            raise ConfigError("run_dir", f"{path} is a finished run; there is nothing to "
                              "resume")
        rd = cls.__new__(cls)
        rd.out_dir, rd.run_id, rd.path = path.parent, run_id, path
        rd.final = path.parent / run_id
        rd.resumed = True
        if rd.final.exists():
            raise ConfigError("run_dir", f"{rd.final} already exists; move it away to resume "
                              f"{path}")
        return rd

    def __enter__(self) -> RunDir:
        self.path.mkdir(parents=True, exist_ok=self.path.is_dir() and self.resumed)
        self.identity = identity(self.path)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if identity(self.path) != self.identity:
            return  # removed or replaced under the run: not ours to rename (said already)
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            return  # Ctrl-C: the run is not broken, it stays where `decent resume` finds it
        target = self.final if exc_type is None else self.final.with_name(self.run_id + ".failed")
        try:
            os.replace(self.path, target)
        except OSError:
            if exc_type is None:
                raise
            return  # the run's own error is the one to report
        self.path = target

    def check(self) -> None:
        """One line (an ``OSError`` naming the folder) if the run's directory was removed
        or replaced by another since the run began writing it."""
        now = identity(self.path)
        if now != self.identity:
            what = "removed" if now is None else "replaced by another folder"
            raise OSError(errno.ENOENT, f"the run directory was {what} while the run wrote "
                          "it; the run stopped (its last checkpoint is gone with it)",
                          str(self.path))

    def write_text(self, name: str, text: str) -> None:
        self.write_bytes(name, text.encode())

    def write_bytes(self, name: str, data: bytes) -> None:
        tmp = self.path / f".{name}.tmp"
        try:
            tmp.write_bytes(data)
            os.replace(tmp, self.path / name)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            if exc.filename:
                raise
            # a file object's write errors (a full disk) name no file: name it
            raise OSError(exc.errno, exc.strerror, str(self.path / name)) from None
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def write_json(self, name: str, data: Any) -> None:
        self.write_text(name, json.dumps(data, indent=2, sort_keys=True) + "\n")


def identity(path: Path) -> tuple[int, int] | None:
    """The folder's device and inode (None: it is gone)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


class Segments:
    """``segments.json``: each stretch of a run that one process ran (the first from round
    0, each resume from its checkpoint), with its wall time and restarts, kept up to date
    every round, so that a resumed run's summary gives the wall time of the whole run.
    A segment that was killed counts up to its last completed round."""

    FILE = "segments.json"

    def __init__(self, rd: RunDir, start: int, env: dict[str, Any]) -> None:
        self.rd = rd
        path = rd.path / self.FILE
        try:
            past = json.loads(path.read_text()) if rd.resumed and path.is_file() else []
        except ValueError:
            past = []  # cut short by a kill: the earlier segments' times are unknown
        self.segments: list[dict[str, Any]] = past if isinstance(past, list) else []
        self.t0 = time.perf_counter()
        # the fingerprint of the arithmetic this stretch's rows were made with
        # (environment.describe)
        self.current = {"from_round": start, "to_round": start, "wall_s": 0.0,
                        "restarts": 0, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                        "environment": env}
        self.segments.append(self.current)

    def update(self, round_: int, restarts: int) -> None:
        self.current.update(to_round=round_, restarts=restarts,
                            wall_s=time.perf_counter() - self.t0)
        self.rd.write_json(self.FILE, self.segments)

    def walls(self) -> list[float]:
        return [float(s.get("wall_s", 0.0)) for s in self.segments]

    def total_wall(self) -> float:
        self.current["wall_s"] = time.perf_counter() - self.t0
        return sum(self.walls())

    def total_restarts(self) -> int:
        return sum(int(s.get("restarts", 0)) for s in self.segments)
