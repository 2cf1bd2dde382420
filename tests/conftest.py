"""Shared fixtures: offline everything, one small Ray session for the whole test run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Tests never touch the network: W&B offline, Hugging Face offline, Ray on 127.0.0.1.
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.pop("RAY_ADDRESS", None)



# The longest test files, started first: with two workers taking a file at a time, a long
# file that starts last keeps one worker busy after the other has finished. The files of
# background jobs go last: their jobs run from the session's start (tests/background.py).
LONGEST_FIRST = ("test_actor_loss.py", "test_rdt.py", "test_ray_lean.py",
                 "test_llm_tasks.py")
BACKGROUND_KEY = pytest.StashKey[list]()  # the jobs the controller started
CUT_SHORT = pytest.StashKey[bool]()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    from tests.background import JOBS

    last = list(JOBS.values())

    def rank(item: pytest.Item) -> int:
        name = item.path.name
        if name in last:
            return len(LONGEST_FIRST) + 1 + last.index(name)
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: each file's own order is kept


def runs_file(config: pytest.Config, name: str) -> bool:
    """Whether this session runs the cluster tests of test file ``name``: no path given,
    or one that holds it, and no ``-m`` leaving slow or cluster tests out (-k is not
    looked at: at worst a job runs for nothing)."""
    marks = config.getoption("markexpr") or ""
    if "not slow" in marks or "not cluster" in marks:
        return False
    here = Path(__file__).parent / name
    paths = [Path(a.split("::")[0]).resolve() for a in config.args] or [here.parent]
    return any(p == here or (p.is_dir() and here.is_relative_to(p)) for p in paths)


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, the controller starts the background jobs of the test files the
    session runs before the workers start: they inherit where each writes."""
    if hasattr(config, "workerinput") or not config.getoption("numprocesses", None):
        return
    import tempfile

    from tests import background

    started = []
    for job, name in background.JOBS.items():
        if runs_file(config, name):
            out = Path(tempfile.mkdtemp(prefix=f"decent-{job}-"))
            started.append((background.start(job, out), out))
            os.environ[background.env_key(job)] = str(out)
    config.stash[BACKGROUND_KEY] = started


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config.stash[CUT_SHORT] = exitstatus == pytest.ExitCode.INTERRUPTED


def pytest_unconfigure(config: pytest.Config) -> None:
    """Each background job is waited for (it has ended by the time its tests have read
    it), or stopped with its whole session if the run was cut short; its folder removed."""
    import contextlib
    import shutil
    import signal
    import subprocess

    from tests.helpers import in_session

    for proc, out in config.stash.get(BACKGROUND_KEY, []):
        try:
            proc.wait(timeout=0 if config.stash.get(CUT_SHORT, False) else 60)
        except subprocess.TimeoutExpired:
            for pid in in_session(proc.pid):  # the job, its Ray nodes and workers
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(out, ignore_errors=True)


@pytest.fixture(scope="session")
def ray_session():
    """One embedded Ray for every test that needs it, shut down at the end."""
    import ray

    started = False
    if not ray.is_initialized():
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            object_store_memory=200 * 2**20,
            log_to_driver=False,
        )
        started = True
    yield ray
    if started:
        from decent.backends.ray import warm

        warm.drop_all()  # the actor processes runs handed back for the next
        ray.shutdown()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The real GLUE/SuperGLUE files, which sit beside the checkout in ../shared/data."""
    from tests.helpers import SHARED_DATA

    if not (SHARED_DATA / "sst2" / "train.jsonl").is_file():
        pytest.skip(f"shared benchmark data not found at {SHARED_DATA} (it lives beside the "
                    "checkout, in ../shared/data)")
    return SHARED_DATA


@pytest.fixture()
def folder(tmp_path, monkeypatch):
    """An empty working folder; the files it imports (a config's ``imports:``) and what
    they register are forgotten after."""
    import sys

    from decent.engine import imports
    from decent.strategies.registry import STRATEGIES

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(STRATEGIES, "_entries", dict(STRATEGIES._entries))
    loaded: dict[str, Path] = {}
    monkeypatch.setattr(imports, "_FILES", loaded)
    yield tmp_path
    for name in loaded:  # the modules import_plugins made from files, and only those
        sys.modules.pop(name, None)
