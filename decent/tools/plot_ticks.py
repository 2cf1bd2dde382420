"""Tick labels that never overlap, on every plot ``decent report`` draws.

Two parts. Bytes are written in engineering units (``400 MB``, ``2 GB``, :func:`bytes_axis`),
which keeps them short: Matplotlib's ``2×10⁹`` on the minor ticks of a log axis that spans
less than a decade ran into each other. And :func:`fit_tick_labels`, called once a figure's
layout is final, measures every drawn tick label with the renderer and blanks each one
whose box would touch a label already kept (the major ticks first, then the minor ones),
whatever the values, the panel width or the font. The blanking is keyed on tick values
in the axis' formatter, so it holds when the figure is drawn again (``savefig``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from matplotlib.ticker import EngFormatter, Formatter, LogFormatterSciNotation

if TYPE_CHECKING:
    from matplotlib.axis import Axis
    from matplotlib.figure import Figure
    from matplotlib.transforms import Bbox

GAP_PX = 4.0  # the least room between two kept labels: touching labels read as one


class EngLogFormatter(LogFormatterSciNotation):
    """A log axis' labels in engineering units (``200 MB``, ``1 GB``): on the ticks that
    Matplotlib's log formatter labels (every minor tick of an axis shorter than a decade,
    some on a longer one, only the decades on a long one), in EngFormatter's words."""

    def __init__(self, unit: str) -> None:
        super().__init__(labelOnlyBase=False)
        self.eng = EngFormatter(unit=unit)

    def __call__(self, x: float, pos: int | None = None) -> str:
        return self.eng(x) if super().__call__(x, pos) else ""


def bytes_axis(axis: Axis, log: bool) -> None:
    """Bytes on ``axis`` in engineering units with the unit B."""
    if log:
        axis.set_major_formatter(EngLogFormatter("B"))
        axis.set_minor_formatter(EngLogFormatter("B"))
    else:
        axis.set_major_formatter(EngFormatter(unit="B"))


class Blanked(Formatter):
    """``inner``'s labels, blank at the tick values in ``hidden``."""

    def __init__(self, inner: Formatter, hidden: set[float]) -> None:
        self.inner, self.hidden = inner, hidden

    def blank(self, x: float) -> bool:
        return any(math.isclose(x, h, rel_tol=1e-9, abs_tol=1e-300) for h in self.hidden)

    def set_axis(self, axis: Any) -> None:
        super().set_axis(axis)
        self.inner.set_axis(axis)

    def set_locs(self, locs: Any) -> None:
        super().set_locs(locs)
        self.inner.set_locs(locs)

    def __call__(self, x: float, pos: int | None = None) -> str:
        return "" if self.blank(x) else self.inner(x, pos)

    def format_ticks(self, values: Any) -> list[str]:
        texts = self.inner.format_ticks(values)
        return ["" if self.blank(v) else t for v, t in zip(values, texts, strict=True)]

    def get_offset(self) -> str:
        return self.inner.get_offset()

    def format_data(self, value: float) -> str:
        return self.inner.format_data(value)

    def format_data_short(self, value: float) -> str:
        return self.inner.format_data_short(value)


def drawn_labels(axis: Axis, minor: bool) -> list[tuple[float, Any]]:
    """(tick value, label) of each label ``axis`` draws: visible, with text, its tick in
    the view (the locator also places ticks beyond it, which are not drawn)."""
    locs = axis.get_minorticklocs() if minor else axis.get_majorticklocs()
    ticks = axis.get_minor_ticks(len(locs)) if minor else axis.get_major_ticks(len(locs))
    low, high = sorted(axis.get_view_interval())
    slack = 1e-9 * max(abs(low), abs(high))
    return [(loc, label) for loc, tick in zip(locs, ticks, strict=True)
            if low - slack <= loc <= high + slack
            for label in (tick.label1, tick.label2)
            if label.get_visible() and label.get_text()]


def fit_tick_labels(fig: Figure) -> None:
    """Blank the tick labels of ``fig`` that would overlap a neighbour (see the module);
    call after the layout (``tight_layout``, the legend) is final."""
    fig.canvas.draw()  # places and writes every tick label
    renderer = fig.canvas.get_renderer()
    # shared axes share their tickers: one set of blanked values per ticker
    blanks: dict[int, tuple[Axis, bool, set[float]]] = {}
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        for axis in (ax.xaxis, ax.yaxis):
            kept: list[Bbox] = []
            for minor in (False, True):  # the major ticks' labels have the first claim
                labels = drawn_labels(axis, minor)
                labels.sort(key=lambda vl: vl[0])
                for value, label in labels:
                    box = label.get_window_extent(renderer).padded(GAP_PX / 2)
                    if any(box.overlaps(k) for k in kept):
                        ticker = axis.minor if minor else axis.major
                        blanks.setdefault(id(ticker), (axis, minor, set()))[2].add(value)
                    else:
                        kept.append(box)
    for axis, minor, values in blanks.values():
        formatter = axis.get_minor_formatter() if minor else axis.get_major_formatter()
        if isinstance(formatter, Blanked):  # fitted before: blank more of the same labels
            formatter = Blanked(formatter.inner, formatter.hidden | values)
        else:
            formatter = Blanked(formatter, values)
        if minor:
            axis.set_minor_formatter(formatter)
        else:
            axis.set_major_formatter(formatter)
