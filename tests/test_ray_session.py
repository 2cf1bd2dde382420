"""Which Ray a run uses: its own embedded one unless an address says otherwise, whatever
``ray_current_cluster`` file the machine has; a cluster address where nothing answers is
one line, not minutes of retries."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from decent.tools.cli import main
from tests.helpers import tiny


@pytest.mark.parametrize(("override", "env", "said"), [
    (["ray.address=127.0.0.1:1"], {}, "ray.address: nothing answers at 127.0.0.1:1 ("),
    ([], {"RAY_ADDRESS": "127.0.0.1:1"}, "RAY_ADDRESS: nothing answers at 127.0.0.1:1 ("),
    (["ray.address=head-without-port"], {}, "ray.address: 'head-without-port' is not "
                                            "HOST:PORT")])
def test_a_cluster_address_nothing_answers_at_is_one_line(tmp_path, capsys, monkeypatch,
                                                          override, env, said):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(tiny(tmp_path, backend="ray")))
    assert main(["run", str(path), *override]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {said}"), err
    assert "start the cluster's head" in err or "give the head's address" in err
    assert not (tmp_path / "runs").exists()  # nothing written


def test_a_stale_current_cluster_file_does_not_capture_an_embedded_run(tmp_path):
    """``ray_current_cluster`` naming a head that is gone (a crashed `ray start --head`):
    ``ray.init()`` without an address would attach to it and refuse ``num_cpus``; an
    embedded run starts its own Ray and ends well. Ray's temporary folder is moved
    (RAY_TMPDIR, short: Ray's socket paths must fit in 107 bytes) so that the file
    planted is this test's own, not the machine's."""
    ray_tmp = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))
    try:
        (ray_tmp / "ray").mkdir()
        (ray_tmp / "ray" / "ray_current_cluster").write_text("127.0.0.1:1")
        # one actor: what is looked at is which Ray the run starts, not its actors (each
        # a process to start, in the Ray this test starts beside the session's own)
        cfg = tiny(tmp_path, rounds=2, backend="ray", topology={"name": "ring", "n": 4},
                   ray={"clients_per_actor": 4, "memory_plan": False, "num_cpus": 2})
        path = tmp_path / "cfg.yaml"
        path.write_text(yaml.safe_dump(cfg))
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env["RAY_TMPDIR"] = str(ray_tmp)
        decent = Path(sys.executable).parent / "decent"
        proc = subprocess.run([str(decent), "run", str(path)], capture_output=True,
                              text=True, env=env, timeout=300,
                              cwd=Path(__file__).resolve().parents[1])
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "run directory: " in proc.stdout
        # it started its own: a session of its own under the moved folder
        assert list((ray_tmp / "ray").glob("session_*"))
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
