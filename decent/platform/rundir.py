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


class RunDir:
    def __init__(self, out_dir: str | Path, name: str) -> None:
        self.out_dir = Path(out_dir)
        self.run_id = f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
        self.final = self.out_dir / self.run_id
        self.path = self.out_dir / f".{self.run_id}.partial"

    def __enter__(self) -> RunDir:
        self.path.mkdir(parents=True)
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
