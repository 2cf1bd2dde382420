"""Resident memory of a process and all its descendants, read from /proc (Linux)."""

from __future__ import annotations

import os
import threading
from pathlib import Path


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        tree.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    return tree


def tree_rss_mb(root: int | None = None) -> float:
    """Sum of VmRSS over ``root`` (default: this process) and its descendants."""
    tree, todo, total = _children(), [root or os.getpid()], 0
    while todo:
        pid = todo.pop()
        todo.extend(tree.get(pid, []))
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


class PeakSampler:
    """Samples :func:`tree_rss_mb` in a background thread; ``peak`` is the maximum seen."""

    def __init__(self, every_s: float = 0.2) -> None:
        self.every_s = every_s
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, tree_rss_mb())
            self._stop.wait(self.every_s)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, tree_rss_mb())
