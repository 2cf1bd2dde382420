"""Command-line overrides against a config file: switching a component drops the file's
fields the new one does not declare (saying which), and ``~key`` deletes a key."""

from __future__ import annotations

import pytest
import yaml

from decent.core.errors import ConfigError
from decent.engine.config import load_config
from decent.tools.cli import main


def write(tmp_path, data):
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


FILE = {"name": "t", "rounds": 1, "topology": {"name": "ring", "n": 4},
        "strategy": {"name": "dsgd", "local_steps": 3, "batch_size": 4, "lr": 0.1,
                     "momentum": 0.5},
        "task": {"name": "digits"}, "model": {"name": "mlp", "hidden": [8]}}


def test_switching_the_strategy_drops_the_old_ones_fields_in_one_line(tmp_path, capsys):
    cfg = load_config(write(tmp_path, FILE), ["strategy.name=seedflood"])
    assert cfg.strategy.name == "seedflood"
    assert cfg.strategy.batch_size == 4 and cfg.strategy.lr == 0.1  # SeedFlood's too: kept
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"strategy.name=seedflood: dropped strategy.local_steps, "
                   f"strategy.momentum from {tmp_path / 'cfg.yaml'} (dsgd's, not seedflood's)"]


def test_the_same_strategy_or_a_shared_field_drops_nothing(tmp_path, capsys):
    cfg = load_config(write(tmp_path, FILE), ["strategy.name=dsgd"])
    assert cfg.strategy.momentum == 0.5
    cfg = load_config(write(tmp_path, FILE), ["strategy.name=choco"])
    assert cfg.strategy.local_steps == 3 and cfg.strategy.momentum == 0.5
    assert capsys.readouterr().err == ""


def test_tilde_deletes_a_key_and_a_missing_one_is_one_line(tmp_path, capsys):
    path = write(tmp_path, FILE)
    cfg = load_config(path, ["~strategy.momentum", "~model.hidden"])
    assert cfg.strategy.momentum == 0.0 and cfg.model.hidden == [64]  # the defaults
    with pytest.raises(ConfigError, match="no such key"):
        load_config(path, ["~strategy.nope"])
    assert main(["run", str(path), "~strategy.nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: overrides: ~strategy.nope")
