"""The shape of a meshgrid or torus: ``rows × cols = n`` with both sides long enough for
the graph to be itself (a meshgrid of one row is a path; a torus side of two wraps onto
itself and doubles its edges). Plain arithmetic, so that the config's validation refuses a
bad shape before any graph is built."""

from __future__ import annotations

import math
from numbers import Integral

from decent.core.errors import ConfigError


def default_rows(n: int) -> int:
    """Largest divisor of ``n`` not above ``sqrt(n)``: the squarest grid."""
    return max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)


def _factors_as_grid(n: int, min_side: int) -> bool:
    return default_rows(n) >= min_side


def _nearest_grid_sizes(n: int, min_side: int) -> tuple[int, int]:
    """The closest sizes below and above ``n`` that do factor as a grid."""
    lo = next(
        (m for m in range(n - 1, min_side * min_side - 1, -1) if _factors_as_grid(m, min_side)),
        None,
    )
    hi = next(
        m
        for m in range(max(n + 1, min_side * min_side), 4 * n + 16)
        if _factors_as_grid(m, min_side)
    )
    return (lo if lo is not None else hi), hi


def grid_shape(kind: str, n: int, rows: int | None, min_side: int,
               prefix: str = "topology") -> tuple[int, int]:
    """``(rows, cols)`` of a ``kind`` grid on ``n`` clients with sides ≥ ``min_side``
    (``rows`` None: the squarest); a shape that cannot be is one line naming the field."""
    if rows is not None:
        fits = [d for d in range(min_side, n // min_side + 1) if n % d == 0]
        fix = f"choose one of: {', '.join(map(str, fits))}" if fits else \
            f"no rows fit n={n}: change {prefix}.n"
        if isinstance(rows, bool) or not isinstance(rows, Integral) or rows < min_side:
            # a torus side of 2 wraps onto itself; a grid side of 1 is a path
            raise ConfigError(f"{prefix}.rows", f"{kind} needs rows ≥ {min_side} (got "
                              f"{rows!r}); {fix}")
        if n % rows != 0:
            raise ConfigError(f"{prefix}.rows", f"rows={rows} does not divide n={n}; {fix}")
        cols = n // rows
        if cols < min_side:
            raise ConfigError(f"{prefix}.rows", f"rows={rows} leaves cols = n/rows = {cols}, "
                              f"but {kind} needs cols ≥ {min_side}; {fix}")
        return rows, cols
    rows = default_rows(n)
    if rows < min_side:
        why = f"{n} is prime" if rows == 1 else f"{n} has no such factorisation"
        lo, hi = _nearest_grid_sizes(n, min_side)
        sizes = f"{lo} or {hi}" if lo != hi else f"{hi}"
        raise ConfigError(
            f"{prefix}.n",
            f"{kind} needs n = rows·cols with rows, cols ≥ {min_side}; {why} — use e.g. "
            f"{sizes} ({prefix}.rows then picks the grid's shape)",
        )
    return rows, n // rows
