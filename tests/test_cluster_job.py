"""The cluster path: `ray job submit` of a `decent run` to a Ray head, and the launcher
configs.

The cluster guide's two blocks (docs/guides/cluster.md) — the single-machine dry run (head
start, wait, job submit, stop) and the autoscaling cluster on one machine
(cluster-local.yaml) — run by bash exactly as written, in a copy of the checkout
(tests/cluster_guide_blocks.py, a background job of `make test`'s cluster step), so the
runtime environment file, the working directory, the console script on the cluster and the
driver's connection via ``RAY_ADDRESS`` are all exercised. The dry run runs beside
another Ray on Ray's default ports, which the blocks once used and would have sent their
job to: the block as written, on a machine that also has what once broke it. Only
subprocesses touch Ray: the test process may host an embedded Ray of other tests, which
must be left alone.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from decent.models.mlp import MLPConfig, build_mlp, num_parameters
from tests import background

REPO_ROOT = Path(__file__).resolve().parents[1]

# the dry run's job: experiments/quickstart.yaml (ring of 16) with rounds=10
ROUNDS, N = 10, 16


def ring_dsgd_bytes(rounds: int, n: int, d: int) -> int:
    """DSGD on a ring: each round every client sends its float32 model to its 2 neighbours."""
    return rounds * 2 * n * 4 * d


@pytest.fixture(scope="module")
def blocks(tmp_path_factory) -> dict[str, Any]:
    return background.findings("cluster_guide_blocks", tmp_path_factory.mktemp("blocks"))


def ran(found: dict[str, Any]) -> dict[str, Any]:
    """A block's findings, checked to have run to a job that succeeded, leaving nothing."""
    assert found["code"] == 0, found["logs"]
    assert re.search(r"Job 'raysubmit_\w+' succeeded", found["logs"]), found["logs"]
    assert found["leftovers"] == {}, f"the block's teardown left {found['leftovers']} alive"
    assert len(found["runs"]) == 1, found["runs"]
    return found["runs"][0]


@pytest.mark.slow
@pytest.mark.cluster  # a Ray head, a job and its teardown, end to end (~35 s)
def test_the_guides_dry_run_works_as_written(blocks) -> None:
    """The head starts, the job waits for it, `decent run` runs on it as a Ray job, and the
    block stops its own head (the run beside another Ray: the test below)."""
    run = ran(blocks["beside_another_ray"])
    summary = run["summary"]
    assert summary["backend"] == "ray"
    assert summary["rounds"] == ROUNDS
    assert summary["clients"] == N
    d = num_parameters(build_mlp(MLPConfig(), {"input_dim": 64, "num_classes": 10}))
    assert summary["bytes_total"] == ring_dsgd_bytes(ROUNDS, N, d)
    assert run["rows"] == ROUNDS


@pytest.mark.slow
@pytest.mark.cluster  # a second Ray on the default ports, the dry run beside it (~60 s)
def test_the_guides_dry_run_leaves_another_ray_alone(blocks) -> None:
    """With another Ray on this machine on Ray's default ports (6379, 8265), the block's
    job runs on the head the block started, not on that one, and the block stops its own
    head only."""
    found = blocks["beside_another_ray"]
    run = ran(found)
    assert run["summary"]["backend"] == "ray" and run["summary"]["rounds"] == ROUNDS
    # submitted to the job API of the port the block picked, never to the default one
    submitted = re.findall(r"http://127\.0\.0\.1:(\d+)", found["logs"])
    assert submitted and "8265" not in submitted, found["logs"]
    other = found["other"]
    if other["started"]:
        # the second Ray, started by the test: no job, no job driver, alive after the block
        assert other["jobs"] == [] and other["drivers"] == [], other
        assert other["alive_after"], "the block stopped the other Ray"
        assert other["leftovers"] == {}, f"the second Ray left {other['leftovers']} alive"
    else:
        # whatever already held the default ports: none of its jobs is this block's
        assert not [e for e in other["jobs"] or [] if found["checkout"] in e], other


@pytest.mark.slow
@pytest.mark.cluster  # a head, two worker nodes the autoscaler adds, a job (~45 s)
def test_the_guides_autoscaling_cluster_works_as_written(blocks) -> None:
    """The autoscaler adds a worker node for each 1-CPU actor (the head has no CPUs), the
    run spans both, and the block's teardown leaves no process of its session alive."""
    summary = ran(blocks["autoscaling"])["summary"]
    assert summary["rounds"] == 3 and summary["ray_actors"] == 2
    # two actors of one CPU each, on a head with none: a node was added for each
    assert summary["ray_nodes"] == 2
    assert len({a["node"] for a in summary["ray_actor_nodes"].values()}) == 2


def test_runtime_env_excludes_bulky_paths() -> None:
    env = yaml.safe_load((REPO_ROOT / "runtime_env.yaml").read_text())
    excludes = set(env["excludes"])
    for pattern in (".venv", ".git", "**/__pycache__", "/runs", "/wandb", "*.egg-info"):
        assert pattern in excludes, pattern
    # The command line's --working-dir is the one source of the working dir.
    assert "working_dir" not in env


def test_working_dir_package_is_small(tmp_path: Path) -> None:
    """Zip the repository the way `ray job submit --working-dir` does (Ray's own packaging
    code, .gitignore ignored so that runtime_env.yaml's excludes alone must suffice)."""
    from zipfile import ZipFile

    from ray._private.runtime_env.packaging import create_package

    excludes = yaml.safe_load((REPO_ROOT / "runtime_env.yaml").read_text())["excludes"]
    package = tmp_path / "working_dir.zip"
    create_package(str(REPO_ROOT), package, include_gitignore=False, excludes=excludes)
    names = ZipFile(package).namelist()
    assert "decent/tools/cli.py" in names
    assert "experiments/quickstart.yaml" in names
    assert "runtime_env.yaml" in names
    assert not [n for n in names if n.startswith((".venv/", ".git/", "runs/", "wandb/"))
                or "__pycache__" in n or ".egg-info/" in n]
    # Ray refuses 100 MiB; source and configs are a few hundred KiB.
    assert package.stat().st_size < 5 * 2**20


def test_cluster_config_parses() -> None:
    cfg = yaml.safe_load((REPO_ROOT / "cluster.yaml").read_text())
    assert cfg["provider"]["type"]
    node_types: dict[str, Any] = cfg["available_node_types"]
    assert cfg["head_node_type"] in node_types
    workers = {name: t for name, t in node_types.items() if name != cfg["head_node_type"]}
    assert workers, "no worker node type"
    assert any(t["resources"].get("GPU", 0) >= 1 for t in workers.values()), "no GPU workers"
    for t in workers.values():
        assert 0 <= t["min_workers"] <= t["max_workers"]
    assert cfg["max_workers"] >= max(t["max_workers"] for t in workers.values())
    setup = "\n".join(cfg["setup_commands"])
    assert "pip install -e ~/decent" in setup
    assert "~/decent" in cfg["file_mounts"]
    assert any("ray start --head" in c for c in cfg["head_start_ray_commands"])
    assert any("ray start" in c and "--address" in c for c in cfg["worker_start_ray_commands"])
