"""`decent sweep` (Ray Tune) and `decent report`: a grid of runs × seeds, resumed without
re-running what finished; bad grids refused before any trial; tables and plots whose
numbers are the runs' own."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import re
import statistics
from pathlib import Path

import pytest
import yaml

from decent.tools.cli import main
from decent.tools.report import report
from decent.tools.sweep import sweep
from tests.helpers import engine_for, tiny


def base_config(tmp_path: Path) -> str:
    cfg = tiny(tmp_path, rounds=2, topology={"name": "ring", "n": 4},
               eval={"every": 1, "per_client": False})
    path = tmp_path / "base.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


GRID = ["--grid", "strategy.lr=0.1,0.05", "topology.n=4,6", "--seeds", "2"]


@pytest.fixture(scope="module")
def sweep_cli(tmp_path_factory, ray_session):
    """The sweep every test here reads, run as `decent sweep` is: its folder, config, and
    what it printed."""
    tmp_path = tmp_path_factory.mktemp("sweep")
    path = base_config(tmp_path)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["sweep", path, *GRID]) == 0
    return tmp_path, path, printed.getvalue()


@pytest.fixture(scope="module")
def swept(sweep_cli):
    tmp_path, path, _ = sweep_cli
    folder = tmp_path / "runs" / "t-sweep"
    index = json.loads((folder / "sweep.json").read_text())
    return tmp_path, path, {**index, "dir": str(folder)}


def wall(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds >= 1 else f"{seconds:.2g} s"


def test_a_sweep_prints_a_line_per_trial_then_a_table(sweep_cli, swept):
    """No Ray Tune tables: one line per trial as it ends (its grid values that vary, seed,
    metric, wall time), then one aligned table of every trial, then the counts."""
    _, _, printed = sweep_cli
    _, _, index = swept
    lines = printed.splitlines()
    assert len(lines) == 8 + (1 + 8) + 2, printed  # trials, table header and rows, counts
    for text in ("Trial status", "│", "╭", "Configuration for experiment", "Trial run_trial"):
        assert text not in printed
    expected, rows = set(), []
    for trial in index["trials"]:
        run_dir = Path(trial["run_dir"])
        cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
        summary = json.loads((run_dir / "summary.json").read_text())
        lr, n, seed = cfg["strategy"]["lr"], cfg["topology"]["n"], cfg["seed"]
        expected.add(f"strategy.lr={lr} topology.n={n} seed={seed}: "
                     f"gmp_accuracy {summary['gmp_accuracy']:.4g}, {wall(summary['wall_s'])}")
        rows.append([str(lr), str(n), str(seed), "done", f"{summary['gmp_accuracy']:.4g}",
                     *wall(summary["wall_s"]).split()])
    assert set(lines[:8]) == expected  # in the order the trials ended
    for line in lines[:8]:
        assert re.fullmatch(r"strategy\.lr=0\.(1|05) topology\.n=[46] seed=[01]: "
                            r"gmp_accuracy [0-9.e-]+, [0-9.e-]+ s", line), line
    header, *table = lines[8:17]
    assert header.split() == ["strategy.lr", "topology.n", "seed", "status", "final",
                              "gmp_accuracy", "wall", "time"]
    assert [row.split() for row in table] == rows  # in the sweep's order
    assert len({len(line) for line in lines[8:17]}) == 1  # the numbers aligned right
    assert {row.index("done") for row in table} == {header.index("status")}
    assert lines[17:] == ["sweep: 8 trials, 8 done", f"sweep directory: {index['dir']}"]


def test_a_sweep_runs_every_combination_and_seed(swept):
    _, _, index = swept
    folder = Path(index["dir"])
    assert len(index["trials"]) == 8 and {t["status"] for t in index["trials"]} == {"done"}
    seen = set()
    for trial in index["trials"]:
        run_dir = Path(trial["run_dir"])
        assert run_dir.parent == folder and (run_dir / "summary.json").is_file()
        cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
        seen.add((cfg["strategy"]["lr"], cfg["topology"]["n"], cfg["seed"]))
        assert cfg["tracking"]["wandb"]["group"] == "t-sweep"  # one W&B group per sweep
    assert seen == {(lr, n, s) for lr in (0.1, 0.05) for n in (4, 6) for s in (0, 1)}
    on_disk = json.loads((folder / "sweep.json").read_text())
    assert [t["key"] for t in on_disk["trials"]] == [t["key"] for t in index["trials"]]


def test_running_a_sweep_again_continues_it(swept, capsys):
    _, path, index = swept
    folder = Path(index["dir"])
    before = sorted(p.name for p in folder.iterdir() if (p / "summary.json").is_file())
    again = sweep(path, ["strategy.lr=0.1,0.05", "topology.n=4,6"], 2, [])
    after = sorted(p.name for p in folder.iterdir() if (p / "summary.json").is_file())
    assert after == before  # nothing re-run
    assert {t["status"] for t in again["trials"]} == {"done"}
    assert main(["sweep", path, *GRID]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 + 8 + 2  # no trial ran: the table of the earlier ones alone
    assert [line.split()[3] for line in lines[1:9]] == ["done"] * 8


@pytest.mark.parametrize(("grid", "text"), [
    (["strategy.lrr=0.1,0.2"], "error: strategy.lrr: unknown key"),
    (["strategy.lr=0.1,-1"], "error: strategy.lr: must be > 0"),
    (["strategy.lr="], "error: --grid strategy.lr: gives no values"),
    (["lr0.1"], "error: --grid: 'lr0.1' is not key=v1,v2"),
    (["topology.n=4,13", "topology.name=meshgrid"], "error: topology.n"),
])
def test_a_bad_grid_is_one_line_before_any_trial(tmp_path, capsys, grid, text):
    path = base_config(tmp_path)
    assert main(["sweep", path, "--grid", *grid]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(text), err
    assert not (tmp_path / "runs").exists()


def test_a_metric_no_run_reports_is_refused_before_any_trial(tmp_path, capsys):
    path = base_config(tmp_path)
    assert main(["sweep", path, "--seeds", "2", "--metric", "gmp_nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --metric: 'gmp_nope' is not in a run's summary of task "
                          "'digits'; choose one of: consensus_distance, gmp_accuracy, "
                          "gmp_loss, "), err
    assert not (tmp_path / "runs").exists()


def test_an_empty_sweep_is_refused(tmp_path, capsys):
    assert main(["sweep", base_config(tmp_path)]) == 2
    assert "the sweep is empty" in capsys.readouterr().err


def test_the_report_table_is_the_runs_own_numbers(swept):
    tmp_path, _, index = swept
    folder = report([index["dir"]], "gmp_accuracy", None, str(tmp_path / "report"))
    text = (folder / "report.md").read_text()
    groups: dict[tuple, list[float]] = {}
    for trial in index["trials"]:
        run_dir = Path(trial["run_dir"])
        cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
        summary = json.loads((run_dir / "summary.json").read_text())
        groups.setdefault((cfg["strategy"]["lr"], cfg["topology"]["n"]), []).append(
            summary["gmp_accuracy"])
    assert "| strategy.lr / topology.n | seeds |" in text
    for (lr, n), values in groups.items():
        mean, std = statistics.mean(values), statistics.stdev(values)
        assert f"| lr={lr}, n={n} | 2 | {mean:.4g} ± {std:.2g} |" in text
    for png in ("gmp_accuracy_vs_bytes.png", "gmp_accuracy_vs_rounds.png",
                "gmp_accuracy_vs_sim_time.png", "edges_0.png"):
        assert (folder / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_groups_by_the_keys_asked(swept, capsys):
    tmp_path, _, index = swept
    assert main(["report", index["dir"], "--by", "topology.n", "--out",
                 str(tmp_path / "by_n")]) == 0
    text = (tmp_path / "by_n" / "report.md").read_text()
    assert "| topology.n=4 | 4 |" in text and "| topology.n=6 | 4 |" in text  # 2 lr × 2 seeds
    assert main(["report", index["dir"], "--by", "strategy.nope"]) == 2
    assert "error: --by" in capsys.readouterr().err
    assert main(["report", index["dir"], "--metric", "gmp_nope"]) == 2
    assert "error: --metric" in capsys.readouterr().err


def test_further_metrics_add_a_column_of_final_values(swept, capsys):
    tmp_path, _, index = swept
    folder = report([index["dir"]], "gmp_accuracy,consensus_distance,gmp_loss", ["topology.n"],
                    str(tmp_path / "more"))
    text = (folder / "report.md").read_text()
    assert "| best gmp_accuracy | consensus_distance | gmp_loss | bytes sent |" in text
    for n in (4, 6):
        dirs = [Path(t["run_dir"]) for t in index["trials"]]
        losses = [json.loads((d / "summary.json").read_text())["gmp_loss"] for d in dirs
                  if yaml.safe_load((d / "config.yaml").read_text())["topology"]["n"] == n]
        row = next(line for line in text.splitlines() if line.startswith(f"| topology.n={n} "))
        cells = [c.strip() for c in row.split("|")[1:-1]]
        assert cells[5] == f"{statistics.mean(losses):.4g} ± {statistics.stdev(losses):.2g}"
    assert main(["report", index["dir"], "--metric", "gmp_accuracy,gmp_nope"]) == 2
    assert "error: --metric: 'gmp_nope' is in no run's summary" in capsys.readouterr().err


def test_columns_pivot_the_final_metric_over_one_key(swept, capsys):
    tmp_path, _, index = swept
    folder = report([index["dir"]], "gmp_loss", ["strategy.lr"], str(tmp_path / "pivot"),
                    "topology.n")
    text = (folder / "report.md").read_text()
    assert "Final gmp_loss by topology.n (seeds per cell: 2):" in text
    assert "| strategy.lr | n=4 | n=6 |" in text
    cells: dict[tuple, list[float]] = {}
    for trial in index["trials"]:
        run_dir = Path(trial["run_dir"])
        cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
        cells.setdefault((cfg["strategy"]["lr"], cfg["topology"]["n"]), []).append(
            json.loads((run_dir / "summary.json").read_text())["gmp_loss"])
    for lr in (0.05, 0.1):
        row = next(line for line in text.splitlines() if line.startswith(f"| lr={lr} |")
                   or line.startswith(f"| strategy.lr={lr} |"))
        got = [c.strip() for c in row.split("|")[2:-1]]
        want = [f"{statistics.mean(v):.4g} ± {statistics.stdev(v):.2g}"
                for v in (cells[(lr, 4)], cells[(lr, 6)])]
        assert got == want
    assert main(["report", index["dir"], "--columns", "topology.nope"]) == 2
    assert "error: --columns: 'topology.nope' is not a config key" in capsys.readouterr().err


def test_a_diverged_run_is_counted_not_averaged():
    from decent.tools.report_tables import final_cell
    from decent.tools.run_records import Run

    runs = [Run(Path("a"), {}, {"gmp_loss": v}, []) for v in (2.0, 3.0, float("nan"))]
    assert final_cell(runs, "gmp_loss") == "2.5 ± 0.71, 1/3 diverged"
    assert final_cell(runs[2:], "gmp_loss") == "diverged (1/1)"


def test_initial_evaluation_is_the_starting_model_and_survives_resume(tmp_path):
    """eval.initial: the summary's initial_* metrics are the untrained model's, also after
    a resume from a checkpoint."""
    from decent.engine.config import from_dict
    from decent.run.runner import resume, run

    cfg = from_dict(tiny(tmp_path, rounds=4, eval={"every": 2, "per_client": False,
                                                   "initial": True},
                         checkpoint={"every": 2}))
    backend = engine_for(cfg)
    expected = backend.evaluate(False, None)  # before any round
    result = run(cfg, backend)
    assert result.summary["initial_gmp_accuracy"] == expected["gmp_accuracy"]
    assert result.summary["initial_gmp_loss"] == expected["gmp_loss"]
    assert result.summary["gmp_loss"] != expected["gmp_loss"]
    # a copy as a run killed after its last round would leave it, resumed from round 2
    from tests.test_checkpoint import stopped_copy

    again = resume(stopped_copy(result.run_dir))
    assert again.summary["initial_gmp_loss"] == expected["gmp_loss"]
    assert again.summary["gmp_loss"] == result.summary["gmp_loss"]


def test_every_shipped_sweep_expands_into_valid_trials():
    """The sweeps under experiments/ (the paper's Table 2 grid among them) would start:
    every trial's config is built and checked, as `decent sweep` does first."""
    from decent.engine.config import load_config
    from decent.run.runner import check
    from decent.tools.sweep import expand, part_name

    root = Path(__file__).resolve().parents[1] / "experiments"
    # hub models are not available offline: the OPT-architecture test model stands in
    offline = ["model.path=tiny-opt"]
    sweeps = [p for p in sorted(root.rglob("*.yaml")) if "runs" not in p.parts
              and load_config(p, offline if "opt-" in p.read_text() else []).sweep.grid]
    assert len(sweeps) >= 7
    for path in sweeps:
        overrides = offline if "opt-" in path.read_text() else []
        base = load_config(path, overrides)
        grid = {k: list(v) for k, v in base.sweep.grid.items()}
        # every value of every key (the others at their first value), and the graph's
        # keys in every combination (a grid shape must fit each n): a config takes ~50 ms
        # to build, the full Table 2 products would take half a minute
        first = {k: v[:1] for k, v in grid.items()}
        subgrids = [{**first, k: [v]} for k, values in grid.items() for v in values]
        subgrids.append({**first, **{k: v for k, v in grid.items() if k.startswith("topology.")}})
        for sub in subgrids:
            for trial in expand(str(path), sub, 1, overrides, base.seed):
                check(trial.config)
        keys = sorted(grid)
        names = ["-".join(part_name(k, v) for k, v in zip(keys, combo, strict=True))
                 for combo in itertools.product(*(grid[k] for k in keys))]
        assert len(set(names)) == len(names)  # every trial its own run name
