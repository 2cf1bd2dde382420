"""What a run leaves behind: run directory, metrics, summary, saved config, W&B files."""

import json

import pytest

from decent.backends.local import local_engine
from decent.engine.config import from_dict, load_config, to_yaml
from decent.run.runner import run
from tests.helpers import tiny


def test_run_directory_contents(tmp_path):
    cfg = from_dict(tiny(tmp_path, rounds=4, eval={"every": 2, "per_client": True}))
    result = run(cfg)
    out = tmp_path / "runs"
    assert [p.name for p in out.iterdir()] == [result.run_dir.name]  # no .partial left
    lines = (result.run_dir / "metrics.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert [r["round"] for r in rows] == [0, 1, 2, 3]
    assert ["gmp_accuracy" in r for r in rows] == [False, True, False, True]
    assert rows[-1]["bytes_total"] == sum(r["bytes"] for r in rows)
    assert rows[-1]["max_edge_bytes_total"] == 4 * rows[0]["max_edge_bytes"]
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["bytes_total"] == rows[-1]["bytes_total"]
    assert summary["gmp_accuracy"] == rows[-1]["gmp_accuracy"]
    assert 0 <= summary["client_accuracy_min"] <= summary["client_accuracy_mean"] <= 1
    # the saved config is the resolved one, and it loads back to the same config
    saved = load_config(result.run_dir / "config.yaml")
    assert to_yaml(saved) == to_yaml(cfg)


def test_failed_run_is_marked_failed_not_partial(tmp_path):
    cfg = from_dict(tiny(tmp_path, rounds=3))
    backend = local_engine(cfg)

    def explode(round_):
        raise RuntimeError("boom")

    backend.run_round = explode
    with pytest.raises(RuntimeError, match="boom"):
        run(cfg, backend)
    names = [p.name for p in (tmp_path / "runs").iterdir()]
    assert len(names) == 1 and names[0].endswith(".failed")


def test_wandb_offline_run_files(tmp_path):
    cfg = from_dict(tiny(tmp_path, rounds=2, tracking={
        "out_dir": str(tmp_path / "runs"), "progress": False, "wandb": {"mode": "offline"}}))
    result = run(cfg)
    offline = list((result.run_dir / "wandb").glob("offline-run-*"))
    assert len(offline) == 1
    assert list(offline[0].glob("*.wandb"))  # the run's log, ready for `wandb sync`


class RecordingRun:
    """What ``wandb.init`` returns, keeping what it was given: the rows logged per step and
    the summary set at the end, in order."""

    id = "recording"

    def __init__(self) -> None:
        self.logged: list[dict] = []
        self.summary: dict = {}
        self.finished: int | None = None

    def log(self, row: dict, step: int) -> None:
        self.logged.append(dict(row))

    def finish(self, exit_code: int) -> None:
        self.finished = exit_code


def test_wandb_keeps_the_runs_figures_in_its_summary(tmp_path, monkeypatch):
    """W&B's summary of a key is the last value logged under it, and a step's row is sent
    when the run finishes, after the summary was set: a key both a row and the summary
    hold shows the row's. So no key may mean one thing per round and another per run:
    the round's wall time is ``round_wall_s``, the run's ``wall_s``; every other shared
    key holds the same value in the last row and the summary."""
    import wandb

    recording = RecordingRun()
    monkeypatch.setattr(wandb, "init", lambda **kw: recording)
    cfg = from_dict(tiny(tmp_path, rounds=3, tracking={
        "out_dir": str(tmp_path / "runs"), "progress": False, "wandb": {"mode": "offline"}}))
    result = run(cfg)
    assert recording.finished == 0 and len(recording.logged) == 3
    assert all("round_wall_s" in row and "wall_s" not in row for row in recording.logged)
    shown = {**recording.summary}
    for row in recording.logged:  # what W&B shows at the end: the last row's values win
        shown.update(row)
    assert shown["wall_s"] == result.summary["wall_s"] == recording.summary["wall_s"]
    assert result.summary["wall_s"] > max(r["round_wall_s"] for r in recording.logged)
    shared = recording.summary.keys() & recording.logged[-1].keys()
    assert shared, "the summary repeats some of the last row's figures (bytes_total, ...)"
    assert {k: shown[k] for k in shared} == {k: recording.summary[k] for k in shared}


def test_every_shipped_experiment_config_is_valid():
    """Each YAML under experiments/ loads and passes every check that needs no data; the
    only failure allowed offline is a hub model that is not in the local cache."""
    from pathlib import Path

    from decent.core.errors import ConfigError
    from decent.engine.config import load_config
    from decent.run.runner import check

    root = Path(__file__).resolve().parents[1] / "experiments"
    # (run records committed beside a report, under runs/, are what ran, not configs)
    configs = sorted(p for p in root.rglob("*.yaml") if "runs" not in p.relative_to(root).parts)
    assert len(configs) >= 10
    hub_only = []
    for path in configs:
        try:
            check(load_config(path))
        except ConfigError as err:
            if err.field != "model.path" or "HF_HUB_OFFLINE" not in err.message:
                raise AssertionError(f"{path}: {err}") from None
            hub_only.append(str(path.relative_to(root)))
    assert not any("pretraining" in name for name in hub_only)
    assert len(hub_only) < len(configs) / 2
