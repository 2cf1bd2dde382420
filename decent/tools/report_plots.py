"""The report's plots: a metric against bytes, rounds or simulated time (mean ± std over
seeds per group); the per-edge heat map is :mod:`.report_edges`'s.

Every series gets a :class:`Style` from :func:`series_styles`: a colour, a line style and a
marker, never the same three for two series of one panel (by construction: a colour index
and a style index per series, and no two series share both). ``facet`` draws one panel per
value of a config key; ``color`` and ``style`` tie the colour, and the line style and
marker, to the value of a config key. The legend sits to the right of the panels, outside
the data, and the figure is saved with ``bbox_inches="tight"`` so it is kept whole. Bytes
are written in engineering units and no two tick labels overlap (:mod:`.plot_ticks`). Scripts
that draw their own series (``experiments/combo/sync_time.py``) use the same helpers.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from decent.tools.plot_ticks import bytes_axis, fit_tick_labels
from decent.tools.report_tables import in_order, label
from decent.tools.run_records import Run

if TYPE_CHECKING:
    from matplotlib.artist import Artist
    from matplotlib.figure import Figure

LINESTYLES: tuple[str, ...] = ("-", "--", ":", "-.")
MARKERS: tuple[str, ...] = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
DPI = 100


@dataclass(frozen=True)
class Style:
    """How one series is drawn: ``plot(..., **style.kwargs())``."""

    color: str
    linestyle: str | tuple[int, tuple[int, int]]
    marker: str

    def kwargs(self) -> dict[str, Any]:
        return {"color": self.color, "linestyle": self.linestyle, "marker": self.marker}


def palette(n: int) -> list[str]:
    """Colours for ``n`` distinct values: tab10 up to ten, else tab20 with its ten dark
    shades (tab10's hues) first and the ten light ones after."""
    import matplotlib
    from matplotlib.colors import to_hex

    if n <= 10:
        cmap = matplotlib.colormaps["tab10"]
        return [to_hex(cmap(i)) for i in range(10)]
    cmap = matplotlib.colormaps["tab20"]
    return [to_hex(cmap(i)) for i in (*range(0, 20, 2), *range(1, 20, 2))]


def line_style(i: int) -> str | tuple[int, tuple[int, int]]:
    """The ``i``-th line style, all different: solid, dashed, dotted, dash-dot, then dash
    patterns that lengthen with ``i``."""
    return LINESTYLES[i] if i < len(LINESTYLES) else (0, (i - 1, 2))


def marker(j: int) -> str:
    """The ``j``-th marker, all different: ten shapes, then the number ``j`` itself."""
    return MARKERS[j] if j < len(MARKERS) else f"${j}$"


def _ranks(parts: Sequence[tuple]) -> dict[tuple, int]:
    return {p: i for i, p in enumerate(sorted(set(parts), key=in_order))}


def series_styles(series: Sequence[tuple], keys: Sequence[str], color: str | None = None,
                  style: str | None = None, facet: str | None = None) -> dict[tuple, Style]:
    """A :class:`Style` for each series, a tuple of the values of ``keys``.

    The colour follows the value of the key ``color``; the line style, and the marker (so
    that a lone point shows it too), that of ``style``. A key left out takes what the
    others leave: with neither, every series has its own colour (then its own line style
    once the colours run out, then marker); with ``color`` only, the series of one colour
    differ in line style, then marker; with ``style`` only, those of one line style differ
    in colour; with both, series that share both values (they differ in a third key)
    differ in marker, as do colours past the palette's twenty. ``facet`` (a panel per
    value) takes no part: a series looks the same in every panel. Two series that differ
    in any key but ``facet`` never get the same (colour, line style, marker), so neither
    do two series of one panel.
    """
    index = {k: i for i, k in enumerate(keys)}

    def part(values: tuple, names: Sequence[str]) -> tuple:
        return tuple(values[index[k]] for k in names)

    rest = [k for k in keys if k not in (facet, color, style)]
    c_keys = [color] if color else rest
    s_keys = [style] if style else []
    r_keys = rest if color else []  # what tells apart series of one colour and style
    c_rank = _ranks([part(v, c_keys) for v in series])
    s_rank = _ranks([part(v, s_keys) for v in series])
    cells: dict[tuple, list[tuple]] = defaultdict(list)
    for values in series:
        cells[part(values, c_keys) + part(values, s_keys)].append(part(values, r_keys))
    r_rank = {cell: _ranks(parts) for cell, parts in cells.items()}
    colours = palette(len(c_rank))
    wraps = math.ceil(len(c_rank) / len(colours))  # colour indices past the palette
    styles = {}
    for values in series:
        c = c_rank[part(values, c_keys)]
        s = s_rank[part(values, s_keys)]
        r = r_rank[part(values, c_keys) + part(values, s_keys)][part(values, r_keys)]
        # (c, s, r) differ between any two series (but for facet), and the colour, the
        # line style i and the marker j give them back: c = c % P + P·(c // P), and
        # c // P < wraps; line_style and marker never repeat
        k = c // len(colours) + wraps * r
        i, j = (s, s + len(s_rank) * k) if style else \
            (k % len(LINESTYLES), k // len(LINESTYLES))
        styles[values] = Style(colours[c % len(colours)], line_style(i), marker(j))
    return styles


def legend_outside(fig: Figure, handles: Sequence[Artist], labels: Sequence[str],
                   title: str | None = None) -> None:
    """The figure's one legend, to the right of every panel (call after the layout is
    final; save with ``bbox_inches="tight"``, as :func:`save` does, to keep it)."""
    if not handles:
        return
    ncol = math.ceil(len(handles) / 18)
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5),
               bbox_transform=fig.transFigure, fontsize=8, ncol=ncol, title=title,
               title_fontsize=8, frameon=False)


def save(fig: Figure, out: Path, dpi: int = DPI) -> None:
    import matplotlib.pyplot as plt

    fig.savefig(out, dpi=dpi, bbox_inches="tight")
    plt.close(fig)


def curves(runs: list[Run], metric: str, x: str) -> tuple[list[float], list[float], list[float]]:
    """Mean and std of ``metric`` over the runs at each evaluated round, against ``x``."""
    by_round: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for run in runs:
        for row in run.rows:
            if metric in row:
                by_round[row["round"]].append((row["round"] + 1 if x == "round" else row[x],
                                               row[metric]))
    xs, means, stds = [], [], []
    for r in sorted(by_round):
        points = by_round[r]
        xs.append(statistics.mean(p[0] for p in points))
        ys = [p[1] for p in points]
        means.append(statistics.mean(ys))
        stds.append(statistics.stdev(ys) if len(ys) > 1 else 0.0)
    return xs, means, stds


X_NAMES = {"bytes_total": "bytes sent (all edges)", "round": "round",
           "sim_time_total_s": "simulated time (s)"}


def metric_figure(groups: dict[tuple, list[Run]], keys: list[str], metric: str, x: str,
                  log_x: bool, facet: str | None = None, color: str | None = None,
                  style: str | None = None, shown: list[str] | None = None) -> Figure:
    """``metric`` against ``x``, one series per group (the values of ``keys``), styled by
    :func:`series_styles`; one panel per value of ``facet`` (one of ``keys``), the panels
    sharing their axes; the legend to the right of the panels, naming each series by
    the keys ``shown`` (default: all but ``facet``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    styles = series_styles(list(groups), keys, color, style, facet)
    at = keys.index(facet) if facet else None
    panels = [None] if at is None else \
        sorted({values[at] for values in groups}, key=lambda v: in_order((v,)))
    ncols = min(len(panels), 3)
    nrows = math.ceil(len(panels) / ncols)
    size = (6.4, 4.2) if len(panels) == 1 else (4.2 * ncols, 3.2 * nrows)
    fig, axes = plt.subplots(nrows, ncols, figsize=size, sharex=True, sharey=True,
                             squeeze=False)
    shown = [k for k in keys if k != facet] if shown is None else shown
    handles: dict[tuple, Artist] = {}
    for ax, panel in zip(axes.flat, panels, strict=False):
        for values, runs in groups.items():
            if at is not None and values[at] != panel:
                continue
            xs, means, stds = curves(runs, metric, x)
            if not xs:
                continue
            look = styles[values]
            if len(xs) < 3:  # a point or two: the spread as error bars, not a band
                line = ax.errorbar(xs, means, yerr=stds, **look.kwargs(), linewidth=1.4,
                                   markersize=6, capsize=3)
            else:
                line, = ax.plot(xs, means, **look.kwargs(), linewidth=1.4, markersize=4,
                                markevery=max(1, len(xs) // 10))
                ax.fill_between(xs, [m - s for m, s in zip(means, stds, strict=True)],
                                [m + s for m, s in zip(means, stds, strict=True)],
                                color=look.color, alpha=0.15, linewidth=0)
            handles.setdefault(tuple(values[keys.index(k)] for k in shown), line)
        if at is not None:
            ax.set_title(label([facet], (panel,)), fontsize=9)
        if log_x:
            ax.set_xscale("log")
        if x == "bytes_total":
            bytes_axis(ax.xaxis, log_x)
        ax.grid(alpha=0.3)
    for k, ax in enumerate(axes.flat):
        if k >= len(panels):
            ax.set_visible(False)
        elif k + ncols >= len(panels):  # nothing drawn below it: it shows the x values
            ax.xaxis.set_tick_params(labelbottom=True)
    ylabel = f"{metric} (mean ± std over seeds)"
    if len(panels) == 1:
        axes[0, 0].set_xlabel(X_NAMES[x])
        axes[0, 0].set_ylabel(ylabel)
    else:
        fig.supxlabel(X_NAMES[x], fontsize=10)
        fig.supylabel(ylabel, fontsize=10)
    fig.tight_layout()
    order = sorted(handles, key=in_order)
    legend_outside(fig, [handles[o] for o in order], [label(shown, o) for o in order])
    fit_tick_labels(fig)
    return fig


def plot_metric(groups: dict[tuple, list[Run]], keys: list[str], metric: str, x: str,
                out: Path, log_x: bool, facet: str | None = None, color: str | None = None,
                style: str | None = None, shown: list[str] | None = None) -> None:
    save(metric_figure(groups, keys, metric, x, log_x, facet, color, style, shown), out)
