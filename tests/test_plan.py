"""``decent plan``: a sweep's grid priced from a probe's seconds per client step and per
evaluated example. The counts are the configs' own (checked by hand here), the estimate
is their product with the probe's figures, a measured probe saved and read back prices
the grid the same, and every bad input is one line."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from decent.engine.config import load_config
from decent.tools.cli import main
from decent.tools.plan import client_steps, evaluations, examples_per_evaluation


def sweep_file(tmp_path, name="dsgd", **strategy) -> str:
    cfg = {
        "name": f"plan-{name}", "rounds": 4, "topology": {"name": "ring", "n": 3},
        "strategy": {"name": name, "lr": 0.05, "batch_size": 4, **strategy},
        "task": {"name": "digits"}, "model": {"name": "mlp", "hidden": [8]},
        "eval": {"every": 2, "per_client": False, "initial": True},
        "tracking": {"out_dir": str(tmp_path / "runs"), "progress": False,
                     "wandb": {"mode": "disabled"}},
        "sweep": {"grid": {"topology.n": [3, 6], "strategy.lr": [0.05, 0.1]}, "seeds": 2},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_a_cells_counts_are_its_configs(tmp_path):
    cfg = load_config(sweep_file(tmp_path, local_steps=5), ["topology.n=6"])
    assert client_steps(cfg) == 6 * 5 * 4  # clients × local steps × rounds
    assert evaluations(cfg) == 1 + 2  # before training, after rounds 2 and 4
    assert examples_per_evaluation(cfg) == 1  # digits states no held-out size
    per_client = load_config(sweep_file(tmp_path, local_steps=5),
                             ["eval.per_client=true", "topology.n=6"])
    assert examples_per_evaluation(per_client) == 7  # the mean model and each client


def record(tmp_path, **probes) -> str:
    path = tmp_path / "record.json"
    path.write_text(json.dumps({"probes": [
        {"method": m, "device": "cuda", "s_per_client_step": step, "s_per_example": ex,
         "clients": 16, "rounds": 3, "source": "a benchmark"}
        for m, (step, ex) in probes.items()]}))
    return str(path)


def test_the_estimate_is_the_probe_figures_times_the_counts(tmp_path, capsys):
    """DSGD: 2 n × 2 lr × 2 seeds = 8 cells, client steps 4 rounds × 5 steps × (3 + 6)
    clients × 4 = 720, evaluations 3 per cell = 24; at 10 s a step and 60 s an
    evaluation: 7 200 + 1 440 s = 2.4 h. SeedFlood is not in the record: its row says
    so and the total prices DSGD only."""
    assert main(["plan", sweep_file(tmp_path, local_steps=5),
                 sweep_file(tmp_path, "seedflood", estimator="mezo"),
                 "--record", record(tmp_path, dsgd=(10.0, 60.0))]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("dsgd "))
    assert row.split()[1:4] == ["8", "720", "10.0000"]
    assert row.split()[4] == "24"
    assert re.search(r" 2\.0 h +0\.4 h +2\.4 h$", row)  # 7 200 s, 1 440 s, their sum
    flood = next(line for line in out.splitlines() if line.startswith("seedflood"))
    assert flood.endswith("(not in the record)")
    assert re.search(r"^all +16 .* 2\.4 h  \(the methods priced\)$", out, re.M)


def test_a_measured_probe_saved_and_read_back_prices_the_grid_the_same(tmp_path, capsys):
    config = sweep_file(tmp_path, local_steps=2)
    saved = tmp_path / "probe.json"
    assert main(["plan", config, "--measure", "2", "--save", str(saved)]) == 0
    measured = capsys.readouterr().out
    probe = json.loads(saved.read_text())["probes"][0]
    assert probe["method"] == "dsgd" and probe["clients"] == 3 and probe["rounds"] == 2
    assert probe["s_per_client_step"] > 0 and probe["s_per_example"] > 0
    assert main(["plan", config, "--record", str(saved)]) == 0
    again = capsys.readouterr().out
    # the same table, the header's "where" aside
    assert again.splitlines()[1:] == measured.splitlines()[1:]


@pytest.mark.parametrize(("args", "says"), [
    (["--measure", "1"], "--measure: at least 2 rounds"),
    (["--measure", "2", "--record", "r.json"], "--measure: measure here or read --record"),
    (["--record", "missing.json"], "--record: cannot read missing.json"),
    (["--record", "bad.json"], "--record: bad.json is not a plan record"),
])
def test_bad_input_is_one_line(tmp_path, capsys, monkeypatch, args, says):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.json").write_text('{"probes": [{"method": "dsgd"}]}')
    assert main(["plan", sweep_file(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {says}") and err.count("\n") == 1
