"""Model selection on validation (the SeedFlood and MeZO protocol): ``eval.select: val_loss``
scores the averaged model on the validation split at every evaluation and the summary
keeps the evaluation of lowest validation loss with its test figures; ``decent report
--select val_loss`` chooses each group's configuration by validation and reports its test
figure; a task without a validation split is refused in one line."""

from __future__ import annotations

import statistics

import pytest
import yaml

from decent.core.errors import ConfigError
from decent.engine.config import from_dict
from decent.run.runner import run
from decent.tools.report import report
from tests.helpers import tiny


def prompted(tmp_path, lr: float, seed: int, **eval_):
    return from_dict(tiny(
        tmp_path, rounds=3, seed=seed, topology={"name": "ring", "n": 4},
        strategy={"name": "dsgd", "local_steps": 2, "batch_size": 4, "lr": lr},
        task={"name": "rotten_tomatoes", "num_train": 16, "num_val": 12, "num_test": 12,
              "max_length": 40},
        model={"name": "causal_lm", "path": "tiny-llama"},
        eval={"every": 1, "per_client": False, "select": "val_loss", **eval_}))


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """2 learning rates × 2 seeds, each a finished run."""
    tmp = tmp_path_factory.mktemp("select")
    return tmp, [run(prompted(tmp, lr, seed)) for lr in (0.05, 0.001) for seed in (0, 1)]


def test_the_summary_keeps_the_evaluation_of_lowest_validation_loss(grid):
    _, results = grid
    for result in results:
        rows = [r for r in result.rows if "val_loss" in r]
        assert len(rows) == 3 and all("val_accuracy" in r for r in rows)
        best = min(rows, key=lambda r: r["val_loss"])
        summary = result.summary
        assert summary["selected_round"] == best["round"]
        assert summary["selected_val_loss"] == best["val_loss"]
        assert summary["selected_gmp_accuracy"] == best["gmp_accuracy"]
        assert summary["selected_gmp_loss"] == best["gmp_loss"]
    # validation and test are different examples: their losses differ
    assert any(r["val_loss"] != r["gmp_loss"] for r in results[0].rows if "val_loss" in r)


def test_report_select_chooses_on_validation_and_reports_the_test_figure(grid):
    tmp, results = grid
    folder = report([str(tmp / "runs")], "gmp_accuracy", ["topology.n"], str(tmp / "rep"),
                    select="val_loss")
    text = (folder / "report.md").read_text()
    selected = text[text.index("Selected by val_loss"):]
    row = next(line for line in selected.splitlines() if line.startswith("| topology.n=4 "))
    means = {lr: statistics.mean(r.summary["selected_val_loss"] for r in results
                                 if lr_of(r) == lr) for lr in (0.05, 0.001)}
    chosen = min(means, key=means.get)
    picked = [r.summary["selected_gmp_accuracy"] for r in results if lr_of(r) == chosen]
    assert f"| strategy.lr={chosen} | 2 |" in row
    assert f"{statistics.mean(picked):.4g}" in row
    for lr, value in means.items():  # what the choice was made on
        assert f"strategy.lr={lr}: {value:.4g}" in row


def lr_of(result) -> float:
    config = yaml.safe_load((result.run_dir / "config.yaml").read_text())
    return config["strategy"]["lr"]


def test_selection_needs_a_validation_split(tmp_path):
    with pytest.raises(ConfigError) as err:
        from_dict(tiny(tmp_path, eval={"select": "val_loss"}))  # digits: no validation
    assert err.value.field == "eval.select" and "num_val" in str(err.value)
    run(from_dict(tiny(tmp_path, rounds=1)))
    with pytest.raises(ConfigError) as err:  # runs made without it
        report([str(tmp_path / "runs")], select="val_loss", out=str(tmp_path / "rep"))
    assert err.value.field == "--select" and "eval.select=val_loss" in str(err.value)
    assert not (tmp_path / "rep").exists()  # refused before anything is written
