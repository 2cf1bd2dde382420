"""Every bad input a user can cause: one line naming the field, exit 2, nothing on disk."""

from pathlib import Path

import pytest
import yaml

from decent.tools.cli import main
from tests.helpers import tiny


def write(tmp_path: Path, cfg: dict) -> str:
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


CASES = [
    # (overrides on the tiny config, field named in the message, a word of the fix)
    (["topology.name=hexagon"], "topology.name", "ring"),
    (["strategy.name=sgdx"], "strategy.name", "dsgd"),
    (["topology.name=meshgrid", "topology.n=13"], "topology.n", "prime"),
    (["topology.name=edge_list", "topology.n=4", "topology.edges=[[0,1],[2,3]]"],
     "topology", "disconnected"),
    (["strategy.lr=0"], "strategy.lr", "> 0"),
    (["strategy.lr=-0.5"], "strategy.lr", "> 0"),
    (["ray.clients_per_actor=0"], "ray.clients_per_actor", "≥ 1"),
    (["ray.actor_slots=0"], "ray.actor_slots", "≥ 1"),
    (["ray.reuse_actors=maybe"], "ray.reuse_actors", ""),
    (["strategy.name=dso", "strategy.compression=[1]"], "strategy.compression",
     "mapping"),
    (["topology.degree=3"], "topology.degree", "allowed keys here: name, n, weights"),
    (["strategy.lrr=0.1"], "strategy.lrr", "allowed keys"),
    (["topolgy.n=4"], "topolgy", "allowed keys"),
    (["ray.clients_per_actr=2"], "ray.clients_per_actr", "clients_per_actor"),
    (["rounds=abc"], "rounds", ""),
    (["execution.mode=fast"], "execution.mode", "batched"),
    (["execution.chunk=0"], "execution.chunk", "≥ 1"),
    (["execution.mode=batched", "strategy.name=combo", "strategy.logit_z_loss=0.1"],
     "execution.mode", "auto"),
    (["backend=spark"], "backend", "local, ray"),
    (["task.name=imagenet"], "task.name", "digits"),
    (["strategy.local_steps"], "overrides", "key=value"),
    (["strategy.name=choco", "topology.name=one_peer"], "topology.name", "static"),
    (["strategy.name=choco", "strategy.compression.keep=0"], "strategy.compression.keep", "(0, 1]"),
    (["strategy.name=diloco", "strategy.compression.name=zip"], "strategy.compression.name",
     "topk"),
    (["strategy.name=gasloc", "strategy.local_steps_per_worker=[1,2]"],
     "strategy.local_steps_per_worker", "6 values"),
    (["strategy.name=gasloc", "strategy.edge_weights=ones"], "strategy.edge_weights", "unit"),
    (["imports=[no_such_module_xyz]"], "imports", "PYTHONPATH"),
]


@pytest.mark.parametrize(("overrides", "field", "fix"), CASES)
def test_bad_input_one_line_no_traceback_nothing_written(tmp_path, capsys, overrides, field, fix):
    path = write(tmp_path, tiny(tmp_path))
    assert main(["run", path, *overrides]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith(f"error: {field}")
    assert fix in err
    assert "Traceback" not in err
    assert not (tmp_path / "runs").exists()


def test_missing_config_file(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: config: file not found")


def test_invalid_yaml(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("rounds: [1, 2\n")
    assert main(["run", str(path)]) == 2
    assert "not valid YAML" in capsys.readouterr().err


def test_topology_errors_in_topo_command(capsys):
    assert main(["topo", "meshgrid", "--n", "7"]) == 2
    assert capsys.readouterr().err.startswith("error: topology.n")


def test_topo_command_prints_ring_figures(capsys):
    assert main(["topo", "ring", "--n", "16"]) == 0
    out = capsys.readouterr().out
    fields = dict(line.split(None, 1) for line in out.splitlines() if line and " " in line)
    assert fields["n"].strip() == "16"
    assert fields["edges"].strip() == "16"
    assert fields["diameter"].strip() == "8"
    assert "0.0507" in out  # 2/3·(1 − cos(2π/16)): Metropolis ring


def test_overrides_may_follow_the_options(tmp_path, capsys):
    """`decent sweep C.yaml --seeds 2 key=value`: the override reaches every trial (here
    a bad one, refused by name before any trial); a stray flag is still one line."""
    path = write(tmp_path, tiny(tmp_path))
    assert main(["sweep", path, "--seeds", "2", "strategy.lrr=0.1"]) == 2
    assert capsys.readouterr().err.startswith("error: strategy.lrr: unknown key")
    assert main(["run", path, "--bogus"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: arguments: unrecognized arguments: --bogus (see decent --help)")
    assert main(["report", str(tmp_path), "x=1"]) == 2  # report takes paths, no overrides
    assert capsys.readouterr().err.strip() == "error: paths: x=1 does not exist"
    assert not (tmp_path / "runs").exists()
