"""Combo's paper setting: its defaults are the paper's (§5.1), the CIFAR-10 config's clock
charges the CNN's real forward + backward FLOPs (counted on the model), which the run
summary records, and the digits stand-ins charge the same round."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from decent.core.errors import ConfigError
from decent.engine.compute import ComputeClock
from decent.engine.config import from_dict, load_config
from decent.models.cnn import CNNConfig, build_cnn
from decent.run.runner import run
from decent.strategies.registry import STRATEGIES
from tests.helpers import save_fake_cifar, tiny

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments" / "combo"
CIFAR_SPEC = {"image_shape": (3, 32, 32), "num_classes": 10}


def cnn_flops_per_example_closed_form() -> int:
    """McMahan's CNN on a 32×32×3 image, from its layer shapes: a convolution or a linear
    layer costs 2·(fan-in)·(outputs) FLOP forward; backward costs twice that (the
    gradients of the weights and of the layer's input), except for the first layer, whose
    input (the image) needs no gradient."""
    conv1 = 2 * (5 * 5 * 3) * 32 * 32 * 32  # 'same' padding: 32×32 outputs, 32 channels
    conv2 = 2 * (5 * 5 * 32) * 64 * 16 * 16  # after 2×2 pooling: 16×16, 64 channels
    fc1 = 2 * (64 * 8 * 8) * 512
    fc2 = 2 * 512 * 10
    forward = conv1 + conv2 + fc1 + fc2
    return 3 * forward - conv1


def cnn_flops_per_example_counted(batch: int = 128) -> float:
    """The same figure counted by torch on a real training step (a batch of 128, the
    cross-entropy loss, ``backward``), per example."""
    torch.manual_seed(0)
    model = build_cnn(CNNConfig(), CIFAR_SPEC)
    x, y = torch.randn(batch, 3, 32, 32), torch.randint(10, (batch,))
    with FlopCounterMode(display=False) as counter:
        torch.nn.functional.cross_entropy(model(x), y).backward()
    return counter.get_total_flops() / batch


CNN_FLOPS = 101_087_232  # per example, forward + backward


def test_the_cnns_flops_per_example_two_ways():
    assert cnn_flops_per_example_closed_form() == CNN_FLOPS
    assert cnn_flops_per_example_counted() == CNN_FLOPS


def test_combo_defaults_are_the_papers():
    cfg = STRATEGIES.config({"name": "combo"})
    # §5.1: lr 0.1, batch 128, 40 SGD updates between synchronisations; S = 10, R = 2
    assert (cfg.local_steps, cfg.batch_size, cfg.lr) == (40, 128, 0.1)
    assert (cfg.segments, cfg.replicas) == (10, 2)
    assert cfg.optimizer == "sgd" and cfg.momentum == 0 and cfg.weight_decay == 0


def test_cifar10_config_as_written_charges_the_cnns_round():
    cfg = load_config(EXPERIMENTS / "cifar10_cnn.yaml")
    model = build_cnn(cfg.model, CIFAR_SPEC)
    clock = ComputeClock(cfg.compute, cfg.seed, [0], model, CIFAR_SPEC, cfg.strategy)
    assert (clock.flops_per_step, clock.flops_source) == (128 * CNN_FLOPS, "counted")
    # 40 steps of 128 examples at 100 GFLOP/s: 5.18 s a round, not 6·N·B's 0.66 s
    round_s = clock.seconds(0, cfg.strategy.local_steps, 0.0)
    assert round_s == pytest.approx(40 * 128 * CNN_FLOPS / 1e11, rel=1e-12)
    assert round(round_s, 2) == 5.18
    six_nb = 6 * sum(p.numel() for p in model.parameters()) * 128 * 40 / 1e11
    assert round(six_nb, 2) == 0.66 and round_s / six_nb > 7.8


@pytest.fixture(scope="module")
def fake_cifar(tmp_path_factory):
    """30 train / 10 test random 32×32 RGB images in CIFAR-10's hub format."""
    pytest.importorskip("datasets")
    return save_fake_cifar(tmp_path_factory.mktemp("cifar") / "saved", 30, 10)


def test_cifar10_run_charges_and_records_the_cnns_flops(tmp_path, fake_cifar):
    # the config file itself, cut to 3 workers, one round of 2 local steps
    cfg = load_config(EXPERIMENTS / "cifar10_cnn.yaml", [
        f"task.data_dir={fake_cifar}", "topology.n=3", "rounds=1", "strategy.local_steps=2",
        "eval.every=1", f"tracking.out_dir={tmp_path}", "tracking.progress=false",
        "tracking.wandb.mode=disabled"])
    result = run(cfg)
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["compute_flops_per_step"] == 128 * CNN_FLOPS
    assert summary["compute_flops_source"] == "counted"
    # the local phase is the round's only compute: 2 steps on every (equally fast) worker
    assert result.rows[0]["sim_compute_s"] == pytest.approx(2 * 128 * CNN_FLOPS / 1e11,
                                                            rel=1e-12)


def digits_cfg(tmp_path, **compute):
    return from_dict(tiny(tmp_path, rounds=1, compute=compute,
                          eval={"every": 1, "per_client": False}))


def test_summary_names_the_source_of_the_flops(tmp_path):
    d = 64 * 16 + 16 + 16 * 10 + 10  # tiny's MLP
    fallback = run(digits_cfg(tmp_path, mode="modelled")).summary
    assert fallback["compute_flops_per_step"] == 6 * d * 8
    assert fallback["compute_flops_source"] == "6nb fallback"
    stated = run(digits_cfg(tmp_path, mode="modelled", flops_per_step=1e9)).summary
    assert (stated["compute_flops_per_step"], stated["compute_flops_source"]) == (
        1e9, "flops_per_step")
    counted = run(digits_cfg(tmp_path, mode="modelled", flops="counted")).summary
    # dense layers: forward 2·(64·16 + 16·10), backward twice that but the input's
    assert counted["compute_flops_per_step"] == 8 * (3 * 2 * (64 * 16 + 16 * 10)
                                                      - 2 * 64 * 16)
    assert counted["compute_flops_source"] == "counted"
    free = run(digits_cfg(tmp_path)).summary  # compute not charged: nothing to record
    assert "compute_flops_per_step" not in free and "compute_flops_source" not in free


def test_a_stated_and_a_counted_figure_are_refused(tmp_path):
    with pytest.raises(ConfigError) as err:
        digits_cfg(tmp_path, mode="modelled", flops="counted", flops_per_step=1e9)
    assert err.value.field == "compute.flops"


@pytest.mark.parametrize("name", ["digits.yaml", "churn.yaml"])
def test_digits_stand_ins_charge_the_cnns_paper_round(name):
    """digits.yaml and churn.yaml train an MLP but charge, per round, the paper's 40 steps
    of batch 128 of the CNN, written to 4 significant figures."""
    cfg = load_config(EXPERIMENTS / name)
    per_step = 40 * 128 * CNN_FLOPS / cfg.strategy.local_steps
    assert f"{cfg.compute.flops_per_step:.4g}" == f"{per_step:.4g}"  # 1.035e11 (5 steps)
    assert cfg.compute.device_tflops == 0.1  # the same assumed worker as cifar10_cnn.yaml


def test_the_summary_records_the_charge_on_ray_as_locally(tmp_path, ray_session):
    base = tiny(tmp_path, rounds=1, strategy={"name": "combo", "local_steps": 2,
                                               "batch_size": 8, "segments": 3},
                compute={"mode": "modelled", "flops": "counted"},
                eval={"every": 1, "per_client": False})
    local = run(from_dict(base)).summary
    on_ray = run(from_dict({**base, "backend": "ray", "ray": {"clients_per_actor": 3}})).summary
    keys = ("compute_flops_per_step", "compute_flops_source", "sim_compute_total_s")
    assert [on_ray[k] for k in keys] == [local[k] for k in keys]
    assert local["compute_flops_source"] == "counted"
