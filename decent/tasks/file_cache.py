"""Data files read once per process while they are unchanged.

A process builds a task once per run it holds clients of: a sweep's trials, a notebook's
runs, the runs whose clients a kept Ray actor hosts. The files a task reads (an installed
dataset, a corpus) seldom change between those runs, and parsing them again is most of
what building a small task costs."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def while_unchanged(maxsize: int) -> Callable[[Callable[[Path], T]], Callable[[Path], T]]:
    """Cache ``read(path)`` per process, keyed by the path and the file's modification time
    and size: a file edited since it was read is read again. What ``read`` returns is
    shared by every caller, so it must be immutable (strings, read-only arrays)."""

    def wrap(read: Callable[[Path], T]) -> Callable[[Path], T]:
        @functools.lru_cache(maxsize=maxsize)
        def version(path: str, mtime_ns: int, size: int) -> T:
            return read(Path(path))

        @functools.wraps(read)
        def cached(path: Path) -> T:
            stat = path.stat()
            return version(str(path), stat.st_mtime_ns, stat.st_size)

        cached_any: Any = cached
        cached_any.cache_clear = version.cache_clear  # forget every file read
        return cached

    return wrap
