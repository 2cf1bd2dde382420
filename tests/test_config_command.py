"""``decent config schema SECTION --imports FILE``: a component of the user's own (a
strategy, a model) printed as decent's own are; ``decent config show`` of a config with
``imports:``; and every bad input one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from decent.core.schema import checked_fields
from decent.tools import config_docs
from decent.tools.cli import main

STRATEGY = '''"""A strategy of one's own: minibatch gradient steps, then the gossip average."""
from dataclasses import dataclass

import torch

from decent.strategies.api import (STRATEGIES, Strategy, StrategyConfig, at_least,
                                   average_with_neighbours, one_of, params, phase,
                                   positive, stochastic_gradient)


@dataclass
class Config(StrategyConfig):
    name: str = "my_sgd"
    lr: float = positive(0.3)  # the step size
    batch_size: int = at_least(1, 4)  # examples per gradient
    # when the clients average: after their step, or before it
    order: str = one_of(("step_then_mix", "mix_then_step"), "step_then_mix")


@dataclass
class State:
    pass


class MySGD(Strategy[State]):
    name, Config, State = "my_sgd", Config, State

    def init_state(self, client, shared):
        return State()

    @phase()
    def step(self, client, inbox, ctx):
        client.stats["loss"], g = stochastic_gradient(client, ctx.task, self.cfg.batch_size)
        live = params.trainable_params(client.model)
        with torch.no_grad():
            params.load(client.model, {k: live[k] - self.cfg.lr * g[k] for k in g})
        return self.to_neighbours(client, ctx, "params", params.snapshot(client.model))

    @phase()
    def mix(self, client, inbox, ctx):
        average_with_neighbours(client, inbox, ctx)


STRATEGIES.register(MySGD.name, Config, MySGD)
'''

MODEL = '''from dataclasses import dataclass

from decent.core.schema import at_least
from decent.models.registry import MODELS


@dataclass
class WideConfig:
    name: str = "wide"
    width: int = at_least(1, 512)  # units of the one hidden layer


MODELS.register("wide", WideConfig, lambda cfg, task: None)
'''


@pytest.fixture
def own(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working folder with a strategy file and a model file of the user's own; what
    they register is forgotten after (``folder`` forgets the strategies)."""
    from decent.models.registry import MODELS

    monkeypatch.setattr(MODELS, "_entries", dict(MODELS._entries))
    (folder / "my_sgd.py").write_text(STRATEGY)
    (folder / "wide.py").write_text(MODEL)
    return folder


def assert_every_field_printed(out: str, section: str, cls: type) -> None:
    """The lines ``decent config schema`` prints for decent's own components: each field,
    its default and its declared range (as tests/test_config_docs.py checks them)."""
    kind = section.partition(".")[0]
    for name, _, check in checked_fields(cls):
        line = next((ln for ln in out.splitlines() if ln.startswith(f"{kind}.{name} ")), None)
        assert line is not None, name
        assert check is None or check.describe() in line
        value = getattr(cls(), name)
        assert f"default {config_docs.format_default(value)};" in line, line


def test_schema_prints_a_strategy_of_ones_own_as_decents_own(
        own: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "schema", "strategy.my_sgd", "--imports", "my_sgd.py"]) == 0
    out = capsys.readouterr().out
    import my_sgd  # imported by the command: the same module

    assert_every_field_printed(out, "strategy.my_sgd", my_sgd.Config)
    lines = out.splitlines()
    assert lines[lines.index(next(ln for ln in lines if ln.startswith("strategy.lr ")))
                 + 1].strip() == "the step size"  # its comment, as for decent's own
    assert "    when the clients average: after their step, or before it" in lines
    assert "choose one of: step_then_mix, mix_then_step" in out
    assert out == config_docs.schema_text("strategy.my_sgd") + "\n"


def test_schema_takes_several_imports_and_lists_what_they_register(
        own: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["config", "schema", "model.wide", "--imports", "my_sgd.py", "--imports", "wide.py"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("model.name ") and "model.width  default 512; must be ≥ 1" in out
    assert main(["config", "schema", "strategy", "--imports", "my_sgd.py"]) == 0
    assert "my_sgd" in capsys.readouterr().out.splitlines()[0]


def test_config_show_imports_what_the_config_lists(own: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from decent.engine.config import from_dict

    path = own / "mine.yaml"
    path.write_text(yaml.safe_dump({"imports": ["my_sgd.py"],
                                    "strategy": {"name": "my_sgd", "lr": 0.5}}))
    assert main(["config", "show", str(path), "strategy.batch_size=2"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["imports"] == ["my_sgd.py"]
    assert shown["strategy"] == {"name": "my_sgd", "lr": 0.5, "batch_size": 2,
                                 "order": "step_then_mix"}  # every default filled in
    again = from_dict(shown)
    assert again.strategy.lr == 0.5


@pytest.mark.parametrize(("argv", "says"), [
    (["config", "schema", "strategy.my_sgd", "--imports", "nowhere.py"],
     "error: imports: file not found: nowhere.py"),
    (["config", "schema", "strategy.my_sgd", "--imports", "broken.py"],
     "error: imports: importing 'broken.py' failed: RuntimeError: boom"),
    (["config", "schema", "strategy.my_sgd", "--imports", "no_such_module_xyz"],
     "error: imports: no module named 'no_such_module_xyz'"),
    (["config", "schema", "strategy.my_sdg", "--imports", "my_sgd.py"],
     "error: section: unknown strategy 'my_sdg' after importing my_sgd.py; choose one of: "),
    (["config", "schema", "strategy.my_sgd"],
     "error: section: unknown strategy 'my_sgd'; choose one of: "),
    (["config", "schema", "strategy.my_sgd", "lr=1", "--imports", "my_sgd.py"],
     "error: arguments: unrecognized arguments: lr=1"),
    (["config", "show", "mine.yaml", "--imports", "my_sgd.py"],
     "error: arguments: --imports goes with config schema"),
    (["config", "show", "missing_import.yaml"], "error: imports: file not found: gone.py"),
])
def test_bad_input_is_one_line_exit_2(own: Path, capsys: pytest.CaptureFixture[str],
                                      argv: list[str], says: str) -> None:
    (own / "broken.py").write_text("raise RuntimeError('boom')\n")
    (own / "mine.yaml").write_text("imports: [my_sgd.py]\nstrategy: {name: my_sgd}\n")
    (own / "missing_import.yaml").write_text("imports: [gone.py]\n")
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1, captured.err
    assert captured.err.startswith(says), captured.err
    assert "Traceback" not in captured.err


def test_an_unknown_component_says_how_to_name_ones_own(
        own: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "schema", "strategy.my_sgd"]) == 2
    err = capsys.readouterr().err
    assert "a strategy of your own needs --imports FILE" in err
    assert main(["config", "schema", "strategy.my_sdg", "--imports", "my_sgd.py"]) == 2
    err = capsys.readouterr().err
    assert "--imports FILE" not in err and "did you mean strategy.my_sgd?" in err
