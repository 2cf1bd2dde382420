"""Memory of a process and all its descendants, read from /proc (Linux).

Two sums: resident memory (VmRSS), which counts a page shared by k processes k times (Ray's
object store is mapped into every worker that reads from it), and proportional set size
(Pss, from smaps_rollup), which charges each process 1/k of such a page: the machine's
real footprint."""

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


def _tree_sum_kb(root: int | None, file: str, key: str) -> float:
    tree, todo, total = _children(), [root or os.getpid()], 0
    while todo:
        pid = todo.pop()
        todo.extend(tree.get(pid, []))
        try:
            for line in Path(f"/proc/{pid}/{file}").read_text().splitlines():
                if line.startswith(key):
                    total += int(line.split()[1])
                    break
        except OSError:
            continue
    return total / 1024


def tree_rss_mb(root: int | None = None) -> float:
    """Sum of VmRSS over ``root`` (default: this process) and its descendants."""
    return _tree_sum_kb(root, "status", "VmRSS:")


def tree_pss_mb(root: int | None = None) -> float:
    """Sum of Pss over ``root`` (default: this process) and its descendants."""
    return _tree_sum_kb(root, "smaps_rollup", "Pss:")


class PeakSampler:
    """Samples :func:`tree_rss_mb` (and, with ``pss``, :func:`tree_pss_mb`) in a background
    thread; ``peak`` and ``peak_pss`` are the maxima seen."""

    def __init__(self, every_s: float = 0.2, pss: bool = False) -> None:
        self.every_s = every_s
        self.pss = pss
        self.peak = 0.0
        self.peak_pss = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.every_s)

    def _sample(self) -> None:
        self.peak = max(self.peak, tree_rss_mb())
        if self.pss:
            self.peak_pss = max(self.peak_pss, tree_pss_mb())

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
