"""Run directories that appear whole or not at all.

A run writes into ``<out_dir>/.<id>.partial`` and is renamed to ``<out_dir>/<id>`` when it
finishes; a run that raises is renamed to ``<id>.failed`` (its metrics so far kept for
debugging). Bad input is refused before the directory is created."""

from __future__ import annotations

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
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        target = self.final if exc_type is None else self.final.with_name(self.run_id + ".failed")
        os.replace(self.path, target)
        self.path = target

    def write_text(self, name: str, text: str) -> None:
        tmp = self.path / f".{name}.tmp"
        tmp.write_text(text)
        os.replace(tmp, self.path / name)

    def write_json(self, name: str, data: Any) -> None:
        self.write_text(name, json.dumps(data, indent=2, sort_keys=True) + "\n")
