"""A mistake in a strategy's own code is one line naming the strategy, the phase, the
client and the round, exit code 1, with the full traceback in the failed run directory's
error.log: a payload with a bare float, a message to a client that is not a neighbour, a
state that is not the strategy's State, and any exception a phase raises; on both
backends."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from decent.tools.cli import main
from tests.helpers import tiny

# A user's strategy (registered through the config's imports:), with one mistake that
# its config picks, made by client 3 from round 1 on.
BUGGY = '''
from dataclasses import dataclass

from decent.core.messages import Message
from decent.models import params
from decent.strategies.base import Strategy
from decent.strategies.config import StrategyConfig
from decent.strategies.phases import phase
from decent.strategies.registry import STRATEGIES


@dataclass
class Config(StrategyConfig):
    name: str = "buggy"
    mistake: str = "none"


@dataclass
class State:
    sent: int = 0


class Buggy(Strategy[State]):
    name, Config, State = "buggy", Config, State

    def init_state(self, client, shared):
        return State()

    @phase()
    def gossip(self, client, inbox, ctx):
        x = params.snapshot(client.model)
        if client.cid != 3 or ctx.round < 1:
            return self.to_neighbours(client, ctx, "x", x)
        if self.cfg.mistake == "float":
            return self.to_neighbours(client, ctx, "x", {"x": x, "scale": 0.5})
        if self.cfg.mistake == "non_edge":
            return [Message(client.cid, 0, "x", x)]  # 3 and 0 are not neighbours on a ring
        if self.cfg.mistake == "state":
            client.state = {"sent": 1}
        if self.cfg.mistake == "raise":
            return self.to_neighbours(client, ctx, "x", x["missing"])
        return self.to_neighbours(client, ctx, "x", x)


STRATEGIES.register(Buggy.name, Config, Buggy)
'''

WHERE = "error: strategy 'buggy', phase 'gossip', client 3, round 1: "
# each mistake: what the line says of it, and what its traceback in error.log shows
MISTAKES = {
    "float": ("payload of type float has no wire size", "wire_size"),
    "non_edge": ("message to client 0, not a neighbour this round: (3, 0) is not an edge "
                 "of round 1's ring graph", "router.py"),
    "state": ("client.state is a dict, not a State (Buggy.State)", "check_state"),
    "raise": ("KeyError: 'missing'", 'x["missing"]'),
}


def buggy_config(folder: Path, **sections: object) -> str:
    (folder / "buggy.py").write_text(BUGGY)
    cfg = tiny(folder, rounds=3, imports=[str(folder / "buggy.py")], strategy={"name": "buggy"},
               eval={"every": 0, "per_client": False}, **sections)
    (folder / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    return "cfg.yaml"


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def check_failed_run(line: str, mistake: str) -> None:
    said, shows = MISTAKES[mistake]
    assert line.startswith(WHERE + said), line
    log = re.search(r"\(traceback: (\S+/error\.log)\)$", line)
    assert log is not None, line
    path = Path(log.group(1))
    assert path.parent.name.endswith(".failed")
    text = path.read_text()
    assert text.startswith(line[len("error: "):line.index(" (traceback:")])
    assert "Traceback (most recent call last)" in text and shows in text


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_a_strategy_mistake_is_one_line_with_its_traceback_in_error_log(folder, capsys,
                                                                         mistake):
    path = buggy_config(folder)
    assert main(["run", path, f"strategy.mistake={mistake}"]) == 1
    check_failed_run(one_line(capsys), mistake)


def test_a_strategy_mistake_inside_a_ray_actor_is_the_same_line(folder, capsys, ray_session):
    path = buggy_config(folder)
    assert main(["run", path, "strategy.mistake=raise", "backend=ray",
                 "ray.clients_per_actor=6", "ray.memory_plan=false"]) == 1
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    check_failed_run(err.splitlines()[-1], "raise")
    # the traceback is the one inside the actor, down to the strategy's own line
    log = err.rsplit("(traceback: ", 1)[1].rstrip(")")
    assert "buggy.py" in Path(log).read_text()
