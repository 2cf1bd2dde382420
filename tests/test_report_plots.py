"""`decent report`'s plots: one panel per value of --facet, colour and line style tied to
--color and --style, never two series of a panel drawn alike, the legend outside the data;
on hand-made run records."""

from __future__ import annotations

import itertools
import json
import struct
from pathlib import Path

import pytest
import yaml

from decent.tools.cli import main
from decent.tools.report_plots import metric_figure, save, series_styles
from decent.tools.run_records import find_runs


def record(root: Path, name: str, seed: int, strategy: dict, n: int) -> None:
    run = root / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump(
        {"name": name, "seed": seed, "strategy": strategy, "topology": {"n": n}}))
    rows = [{"round": r, "bytes_total": 100 * (r + 1), "sim_time_total_s": r + 1.0,
             "gmp_loss": 3.0 / (r + 1 + strategy["lr"] + n + seed)} for r in range(4)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "summary.json").write_text(json.dumps(
        {"gmp_loss": rows[-1]["gmp_loss"], "bytes_total": rows[-1]["bytes_total"],
         "max_edge_bytes_total": 1, "sim_time_total_s": rows[-1]["sim_time_total_s"]}))


KEYS = ["strategy.name", "strategy.lr", "topology.n"]


@pytest.fixture
def runs(tmp_path):
    """2 strategies × 2 lr × 3 n, 2 seeds each: 12 series."""
    for name, lr, n, seed in itertools.product(("dsgd", "choco"), (1, 2), (4, 8, 16), (0, 1)):
        record(tmp_path, f"{name}-lr{lr}-n{n}-s{seed}", seed, {"name": name, "lr": lr}, n)
    return tmp_path


def grouped(path: Path, keys: list[str]) -> dict[tuple, list]:
    groups: dict[tuple, list] = {}
    for run in find_runs([str(path)]):
        groups.setdefault(tuple(run.config[k] for k in keys), []).append(run)
    return groups


def drawn(ax) -> list[tuple]:
    return [(line.get_color(), str(line.get_linestyle()), line.get_marker())
            for line in ax.get_lines()]


def test_one_panel_per_facet_value_and_a_series_looks_the_same_in_each(runs):
    fig = metric_figure(grouped(runs, KEYS), KEYS, "gmp_loss", "round", False,
                        facet="topology.n")
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == [f"topology.n={n}" for n in (4, 8, 16)]
    assert all(len(ax.get_lines()) == 4 for ax in panels)  # 2 strategies × 2 lr each
    assert drawn(panels[0]) == drawn(panels[1]) == drawn(panels[2])
    assert panels[0].get_shared_y_axes().joined(panels[0], panels[2])
    assert panels[0].get_shared_x_axes().joined(panels[0], panels[2])
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == ["name=choco, lr=1", "name=choco, lr=2", "name=dsgd, lr=1",
                      "name=dsgd, lr=2"]  # the facet key is the panel's title, not a label


def test_colour_and_style_follow_their_keys(runs):
    series = list(grouped(runs, KEYS))
    styles = series_styles(series, KEYS, color="strategy.name", style="strategy.lr")
    for a, b in itertools.combinations(series, 2):
        sa, sb = styles[a], styles[b]
        assert (sa.color == sb.color) == (a[0] == b[0])
        if a[1] != b[1]:
            assert sa.linestyle != sb.linestyle  # lr 1 and 2: two line styles
        assert (sa.color, sa.linestyle, sa.marker) != (sb.color, sb.linestyle, sb.marker)
    # the same lr is the same line style whatever the colour; lr and n (the third key)
    # the marker: a lone point shows its lr too
    assert len({styles[s].linestyle for s in series if s[1] == 1}) == 1
    assert len({styles[s].marker for s in series}) == 6
    assert {styles[s].marker for s in series if s[1] == 1}.isdisjoint(
        styles[s].marker for s in series if s[1] == 2)


@pytest.mark.parametrize("color,style,facet", [
    (None, None, None), ("a", None, None), (None, "b", None), ("a", "b", None),
    ("a", "b", "c"), ("c", None, "c"), (None, None, "a"), ("d", None, None)])
def test_no_two_series_of_a_panel_look_alike(color, style, facet):
    # 25 series of a, b (5 × 5), c: 0 or 1, d: 25 values (more colours than tab20 has)
    keys = ["a", "b", "c", "d"]
    series = [(a, b, (a + b) % 2, 5 * a + b) for a in range(5) for b in range(5)]
    styles = series_styles(series, keys, color, style, facet)
    panels: dict = {}
    for values in series:
        panels.setdefault(None if facet is None else values[keys.index(facet)], []).append(
            (styles[values].color, styles[values].linestyle, styles[values].marker))
    for looks in panels.values():
        assert len(set(looks)) == len(looks)


def test_25_series_in_a_figure_are_25_looks(tmp_path):
    for k in range(25):
        record(tmp_path, f"r{k}", 0, {"name": "dsgd", "lr": k}, 4)
    fig = metric_figure(grouped(tmp_path, ["strategy.lr"]), ["strategy.lr"], "gmp_loss",
                        "round", False)
    looks = drawn(fig.axes[0])
    assert len(looks) == 25 and len(set(looks)) == 25


def test_the_legend_lies_outside_the_data_and_the_saved_figure_keeps_it(runs, tmp_path):
    for facet in (None, "topology.n"):
        fig = metric_figure(grouped(runs, KEYS), KEYS, "gmp_loss", "bytes_total", True,
                            facet=facet)
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        legend = fig.legends[0].get_window_extent(renderer)
        for ax in fig.axes:
            if ax.get_visible():
                assert not legend.overlaps(ax.get_window_extent(renderer))
        width = fig.get_figwidth() * 100
        out = tmp_path / f"{facet}.png"
        save(fig, out)
        png_width = struct.unpack(">I", out.read_bytes()[16:20])[0]
        assert png_width > width  # bbox_inches="tight" widened it to take the legend in


def test_the_options_on_the_command_line_and_a_bad_key(runs, capsys):
    out = runs / "rep"
    assert main(["report", str(runs), "--metric", "gmp_loss", "--by", "strategy.name",
                 "--facet", "topology.n", "--color", "strategy.name", "--style",
                 "strategy.lr", "--out", str(out)]) == 0
    for png in ("gmp_loss_vs_bytes.png", "gmp_loss_vs_rounds.png",
                "gmp_loss_vs_sim_time.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = (out / "report.md").read_text()
    assert "| strategy.name=choco | 12 |" in text  # the table keeps --by's groups
    for flag in ("--facet", "--color", "--style"):
        assert main(["report", str(runs), "--metric", "gmp_loss", flag, "strategy.nope",
                     "--out", str(runs / "bad")]) == 2
        err = capsys.readouterr().err.strip()
        assert err == (f"error: {flag}: 'strategy.nope' is not a config key of these runs "
                       "(e.g. strategy.name, topology.n)")
    assert not (runs / "bad").exists()


def test_a_plot_key_the_groups_already_tell_is_left_out_of_the_legend(tmp_path, monkeypatch):
    import decent.tools.report as report_module

    for name, lr, seed in (("dsgd", 1, 0), ("dsgd", 1, 1), ("choco", 2, 0)):
        record(tmp_path, f"{name}-s{seed}", seed, {"name": name, "lr": lr}, 4)
    calls = []
    monkeypatch.setattr(report_module, "plot_metric", lambda *a: calls.append(a))
    report_module.report([str(tmp_path)], "gmp_loss", ["strategy.name"], str(tmp_path / "r"),
                         color="strategy.lr")
    groups, keys, *_, shown = calls[0]
    assert keys == ["strategy.name", "strategy.lr"] and shown == ["strategy.name"]
    assert sorted(groups) == [("choco", 2), ("dsgd", 1)]  # lr splits no name: no new series


def test_runs_that_differ_in_a_list_valued_key_are_grouped_by_it(tmp_path, capsys):
    """AdamW's betas (a list) differ between the runs: the default --by takes the key and
    the report groups by it rather than failing on an unhashable value."""
    for betas, seed in itertools.product(([0.9, 0.999], [0.9, 0.95]), (0, 1)):
        record(tmp_path, f"b{betas[1]}-s{seed}", seed, {"name": "dsgd", "lr": 1, "betas": betas},
               4)
    assert main(["report", str(tmp_path), "--metric", "gmp_loss", "--out",
                 str(tmp_path / "out")]) == 0
    table = (tmp_path / "out" / "report.md").read_text()
    assert table.count("strategy.betas=") == 2 and "| 2 |" in table


def tick_label_boxes(fig, which: str) -> list:
    """(text, window extent) of every x (or y) tick label ``fig`` draws, major and minor,
    on every visible axes (colour bars included)."""
    fig.canvas.draw()  # the Agg canvas: report figures are drawn with matplotlib's Agg
    renderer = fig.canvas.get_renderer()
    boxes = []
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        frame = ax.get_window_extent(renderer)
        labels = ax.get_xticklabels(which="both") if which == "x" else \
            ax.get_yticklabels(which="both")
        for label in labels:
            if not (label.get_visible() and label.get_text()):
                continue
            box = label.get_window_extent(renderer)
            # the locator also places ticks beyond the view: those are not drawn
            middle, low, high = ((box.x0 + box.x1) / 2, frame.x0, frame.x1) if which == "x" \
                else ((box.y0 + box.y1) / 2, frame.y0, frame.y1)
            if low - 1 <= middle <= high + 1:
                boxes.append((label.get_text(), box))
    return boxes


def overlapping(fig, which: str) -> list[tuple[str, str]]:
    boxes = tick_label_boxes(fig, which)
    return [(a, b) for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2)
            if box_a.overlaps(box_b)]


def crowded_groups(scale: float, series: int) -> dict[tuple, list]:
    """``series`` groups with long names, bytes from ``scale`` to 30 × ``scale`` and
    simulated times up to the hundreds of thousands of seconds."""
    from decent.tools.run_records import Run

    groups = {}
    for k in range(series):
        rows = [{"round": r, "bytes_total": scale * (r + 1) + 1000 * k,
                 "sim_time_total_s": 1234.5 * (r + 1) * (k + 1),
                 "gmp_accuracy": 0.1 + 0.8 * r / 30 + 0.001 * k} for r in range(30)]
        name = f"a-rather-long-method-name-number-{k}"
        groups[(name, 8 * (1 + k % 3))] = [Run(Path(f"r{k}"), {}, {}, rows)]
    return groups


@pytest.mark.parametrize("x", ["bytes_total", "sim_time_total_s", "round"])
@pytest.mark.parametrize(("facet", "scale", "series"), [
    (None, 1.7e8, 4), ("topology.n", 2.5e9, 20)])
def test_no_two_tick_labels_overlap(x, facet, scale, series):
    """Large byte counts (a log axis under two decades labels its minor ticks), narrow
    facet panels, a long legend: every x and y tick label drawn keeps clear of the
    others; bytes are written with their unit."""
    keys = ["strategy.very_long_parameter_name_for_a_method", "topology.n"]
    fig = metric_figure(crowded_groups(scale, series), keys, "gmp_accuracy", x,
                        x == "bytes_total", facet=facet)
    assert overlapping(fig, "x") == []
    assert overlapping(fig, "y") == []
    texts = [text for text, _ in tick_label_boxes(fig, "x")]
    assert len(texts) >= 2  # thinned, not emptied
    if x == "bytes_total":
        assert all(text.endswith("B") for text in texts), texts  # 200 MB, 1 GB


def test_the_edge_heat_map_is_directed(tmp_path):
    """edges.json counts each direction on its own: a one-way ring 0 → 1 → 2 → 0 fills
    (0, 1), (1, 2), (2, 0) and leaves their reverses empty; rows send, columns receive."""
    from decent.tools.report_edges import edge_matrix, edges_figure, plot_edges
    from decent.tools.run_records import Run

    edges = {"0-1": 100, "1-2": 200, "2-0": 300}
    matrix = edge_matrix(edges, 3)
    assert matrix.tolist() == [[0, 100, 0], [0, 0, 200], [300, 0, 0]]
    assert edge_matrix({"0-1": 5, "1-0": 7}, 4).tolist()[:2] == [[0, 5, 0, 0], [7, 0, 0, 0]]
    fig = edges_figure(matrix, "one-way ring")
    ax = fig.axes[0]
    assert "sender" in ax.get_ylabel() and "receiver" in ax.get_xlabel()
    shown = ax.images[0].get_array()
    assert shown.filled(0).tolist() == matrix.tolist()
    assert shown.mask.tolist() == (matrix == 0).tolist()  # nothing sent: a blank cell
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "edges.json").write_text(json.dumps(edges))
    run = Run(run_dir, {"topology.n": 3}, {"strategy": "push", "topology": "ring"}, [])
    assert plot_edges(run, tmp_path / "edges.png")
    assert (tmp_path / "edges.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not plot_edges(Run(tmp_path, {}, {}, []), tmp_path / "none.png")


def test_a_heat_map_of_many_clients_keeps_its_tick_labels_apart():
    from decent.tools.report_edges import edge_matrix, edges_figure

    n = 200
    matrix = edge_matrix({f"{i}-{(i + 1) % n}": 2.5e9 + i for i in range(n)}, n)
    fig = edges_figure(matrix, "a ring of 200")
    assert overlapping(fig, "x") == [] and overlapping(fig, "y") == []
