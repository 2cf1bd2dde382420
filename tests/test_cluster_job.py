"""The cluster path: `ray job submit` of a `decent run` to a Ray head, and the launcher config.

The job test starts its own single-node head (tests/ray_head.py) on free local ports and
submits exactly the command the README gives, so the runtime environment file, the
working-dir upload, the console script on the cluster and the driver's connection via
``RAY_ADDRESS`` are all exercised. Only subprocesses touch Ray: the test process may host
an embedded Ray of other tests, which must be left alone.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from decent.models.mlp import MLPConfig, build_mlp, num_parameters
from tests.ray_head import child_env, ray_cli, ray_head

REPO_ROOT = Path(__file__).resolve().parents[1]
JOB_TIMEOUT_S = 300

ROUNDS, N = 2, 4


def ring_dsgd_bytes(rounds: int, n: int, d: int) -> int:
    """DSGD on a ring: each round every client sends its float32 model to its 2 neighbours."""
    return rounds * 2 * n * 4 * d


def job_status(head_url: str, submission_id: str) -> str:
    """The job's status as the head's job API reports it (e.g. ``SUCCEEDED``)."""
    with urllib.request.urlopen(f"{head_url}/api/jobs/{submission_id}", timeout=10) as resp:
        return json.load(resp)["status"]


def test_ray_job_submit_runs_quickstart(tmp_path: Path) -> None:
    out_dir = tmp_path / "runs"
    submission_id = f"decent-test-{tmp_path.name}"
    with ray_head(tmp_path) as head:
        # The README's command, from the repository root.
        submit = subprocess.run(
            [ray_cli(), "job", "submit", "--address", head.dashboard_url,
             "--submission-id", submission_id,
             "--working-dir", ".", "--runtime-env", "runtime_env.yaml",
             "--", "decent", "run", "experiments/quickstart.yaml", "backend=ray",
             f"rounds={ROUNDS}", f"topology.n={N}", "ray.clients_per_actor=2",
             "tracking.wandb.mode=disabled", "tracking.progress=false",
             f"tracking.out_dir={out_dir}"],
            cwd=REPO_ROOT, env=child_env(), capture_output=True, text=True,
            timeout=JOB_TIMEOUT_S)
        logs = f"{submit.stdout}\n{submit.stderr}\n--- head log ---\n{head.log()}"
        assert submit.returncode == 0, logs
        assert job_status(head.dashboard_url, submission_id) == "SUCCEEDED", logs
    assert head.owned_pids() == [], "processes of the test's Ray head are still alive"

    runs = list(out_dir.iterdir())
    assert len(runs) == 1 and runs[0].is_dir(), runs
    summary: dict[str, Any] = json.loads((runs[0] / "summary.json").read_text())
    assert summary["backend"] == "ray"
    assert summary["rounds"] == ROUNDS
    assert summary["clients"] == N
    d = num_parameters(build_mlp(MLPConfig(), {"input_dim": 64, "num_classes": 10}))
    assert summary["bytes_total"] == ring_dsgd_bytes(ROUNDS, N, d)
    assert len((runs[0] / "metrics.jsonl").read_text().splitlines()) == ROUNDS


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
    assert "decent/platform/cli.py" in names
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
