"""The inner learning-rate schedule (warm-up + cosine, DiLoCo's recipe) and the
best-threshold accuracy of binary prompted tasks."""

import copy
import itertools
import math

import numpy as np
import pytest
import torch

from decent.backends.local import local_engine
from decent.core.errors import ConfigError
from decent.engine.config import from_dict
from decent.models import params
from decent.strategies.local_training import LRScheduleConfig
from decent.tasks.prompted import best_threshold_accuracy
from tests.helpers import tiny


def reference_factor(t: int, warmup: int, total: int, floor: float) -> float:
    """The schedule written from its definition: linear warm-up to 1 over `warmup` steps
    (step t at (t+1)/warmup), then half a cosine from 1 down to `floor` at `total`."""
    if t < warmup:
        return (t + 1) / warmup
    progress = min(1.0, (t - warmup) / (total - warmup))
    return floor + (1 - floor) * (1 + math.cos(math.pi * progress)) / 2


def test_cosine_factor_matches_definition():
    sched = LRScheduleConfig(name="cosine", warmup_steps=10, total_steps=110, min_lr_ratio=0.1)
    for t in range(0, 130):
        assert sched.factor(t) == pytest.approx(reference_factor(t, 10, 110, 0.1), abs=1e-12)
    assert sched.factor(0) == pytest.approx(0.1)  # (0 + 1) / 10
    assert sched.factor(10) == pytest.approx(1.0)
    assert sched.factor(60) == pytest.approx(0.55)  # halfway down: (1 + 0.1) / 2
    assert sched.factor(500) == pytest.approx(0.1)
    constant = LRScheduleConfig(warmup_steps=4)
    assert [constant.factor(t) for t in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]


def diloco_cfg(tmp_path, **sched):
    return from_dict(tiny(tmp_path, rounds=4, topology={"name": "star", "n": 3},
                          strategy={"name": "diloco", "local_steps": 3, "batch_size": 8,
                                    "optimizer": "sgd", "lr": 0.1, "weight_decay": 0.0,
                                    "lr_schedule": sched}))


def test_total_steps_defaults_to_the_run_and_bad_lengths_are_refused(tmp_path):
    cfg = diloco_cfg(tmp_path, name="cosine", warmup_steps=2)
    assert cfg.strategy.lr_schedule.total_steps == 4 * 3  # rounds × local_steps
    with pytest.raises(ConfigError, match=r"strategy\.lr_schedule\.warmup_steps"):
        diloco_cfg(tmp_path, name="cosine", warmup_steps=12)
    with pytest.raises(ConfigError, match=r"strategy\.lr_schedule\.total_steps"):
        diloco_cfg(tmp_path, name="cosine", warmup_steps=5, total_steps=5)
    with pytest.raises(ConfigError, match=r"strategy\.lr_schedule\.min_lr_ratio"):
        diloco_cfg(tmp_path, name="cosine", min_lr_ratio=1.5)
    with pytest.raises(ConfigError, match=r"strategy\.lr_schedule\.name"):
        diloco_cfg(tmp_path, name="linear")


def test_workers_step_at_the_scheduled_lr(tmp_path):
    """A worker's local phase, replayed as plain SGD at lr · factor(round · H + i)."""
    from decent.strategies.base import PhaseContext

    backend = local_engine(diloco_cfg(tmp_path, name="cosine", warmup_steps=4))
    group = backend.group
    worker = group.clients[1]
    ref = copy.deepcopy(worker.model)
    gen = torch.Generator().set_state(worker.generator.get_state())
    for r in (0, 1, 3):  # round 3: the steps 9..11 at the end of the decay
        ctx = PhaseContext(round=r, phase="local", step=0,
                           graph=group.topology.round_graph(r), task=group.task)
        backend.strategy.local(worker, [], ctx)
        for i in range(3):
            batch = worker.data.sample(8, gen)
            ref.zero_grad(set_to_none=True)
            group.task.loss(ref, batch).backward()
            with torch.no_grad():
                for p in ref.parameters():
                    p -= 0.1 * reference_factor(r * 3 + i, 4, 12, 0.0) * p.grad
        np.testing.assert_allclose(params.flat_vector(worker.model), params.flat_vector(ref),
                                   rtol=0, atol=1e-6)
    assert worker.state.optimizer.param_groups[0]["lr"] == pytest.approx(
        0.1 * reference_factor(11, 4, 12, 0.0))


@pytest.mark.parametrize("seed", range(5))
def test_best_threshold_accuracy_against_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = 40
    margin = np.round(rng.normal(size=n), 1)  # rounded: ties between margins
    y = rng.integers(0, 2, size=n)
    best = 0.0
    for t in itertools.chain([-np.inf], np.unique(margin)):
        best = max(best, float(np.mean((margin > t).astype(int) == y)))
    assert best_threshold_accuracy(margin, y) == pytest.approx(best, abs=1e-12)
    # a margin that separates the labels perfectly scores 1; argmax accuracy may not
    assert best_threshold_accuracy(y * 2.0 + 5.0, y) == 1.0
