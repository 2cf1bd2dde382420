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
# file that starts last keeps one worker busy after the other has finished.
LONGEST_FIRST = ("test_multinode.py", "test_actor_loss.py", "test_rdt.py",
                 "test_ray_lean.py", "test_llm_tasks.py", "test_cluster_job.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        name = item.path.name
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: each file's own order is kept


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
