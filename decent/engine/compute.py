"""Compute time on the simulated clock: how long a client's part of a phase takes.

Three modes (``compute.mode``):

* ``none`` (default) — compute is free; a run's simulated time is its communication only,
  as in every result quoted before the clock had a compute part;
* ``measured`` — the wall time of the client's phase on its device, divided by the
  client's speed factor; real, but not reproducible (it depends on the machine's load);
* ``modelled`` — steps × ``flops_per_step`` / (``device_tflops``·10¹² × speed factor),
  with the steps the strategy charged (:meth:`~decent.strategies.base.Client.count_steps`:
  one local SGD step, one ZO estimate). Deterministic: the same on both backends.

Speed factors are drawn once per client from ``speed_spread`` (seeded by the run seed and
the client id, so whichever process hosts a client draws the same factor), or listed in
``speeds``: a heterogeneous fleet.

The FLOPs of one step come from one of three places, and the run summary records which
(``compute_flops_per_step``, ``compute_flops_source``) whenever the mode is ``modelled``:

* ``flops_per_step`` stated in the config (``flops_per_step``): token-level accounting of
  a language model, or another model's cost charged on a stand-in;
* ``flops: counted`` (``counted``): the model's own forward + backward FLOPs for one
  example, counted by torch's FlopCounterMode on the model the run builds, × B. Exact
  for convolutions, where 6·N·B is far off: a convolution's weights are reused at every
  position, so McMahan et al.'s CIFAR-10 CNN costs 101 087 232 FLOP per example against
  6·N = 12 938 940. It is a first-order step's cost: a zeroth-order estimate (forward
  passes only) costs less, so state ``flops_per_step`` for those;
* otherwise 6·N·B (``6nb fallback``), the forward + backward cost of N parameters on a
  batch of B examples (Kaplan et al., 2020, §2.1), right for models made of dense layers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from decent.core.errors import ConfigError
from decent.core.schema import one_of, positive
from decent.network.timing import Spread
from decent.strategies.config import StrategyConfig

COMPUTE_MODES = ("none", "measured", "modelled")
FLOPS_COUNTS = ("6nb", "counted")  # without flops_per_step: estimated, or counted on the model
SPEED_SALT = 0x7370  # keeps speed draws independent of every other per-client stream


@dataclass
class ComputeConfig:
    # none: compute is free; measured: the phase's wall time ÷ the client's speed factor; modelled:
    # steps × FLOPs per step ÷ (device_tflops · 10¹² × speed factor)
    mode: str = one_of(COMPUTE_MODES, "none")
    flops_per_step: float | None = positive(None, nullable=True)  # None: as `flops` says
    flops: str = one_of(FLOPS_COUNTS, "6nb")  # how to find the step's FLOPs when not stated
    device_tflops: float = positive(10.0)  # a client device's sustained throughput
    # each client's speed factor (a heterogeneous fleet), drawn once from the run seed and client id
    speed_spread: Spread = field(default_factory=Spread)
    speeds: list[float] = positive([], each=True)  # one factor per client; overrides spread

    def validate(self, prefix: str = "compute") -> None:
        if self.flops_per_step is not None and self.flops == "counted":
            raise ConfigError(f"{prefix}.flops", "counted and a stated flops_per_step are two "
                              "sources for one figure: drop one of them")


def speed_factor(cfg: ComputeConfig, seed: int, cid: int) -> float:
    if cfg.speeds:
        return float(cfg.speeds[cid])
    return cfg.speed_spread.draw(np.random.default_rng([seed, SPEED_SALT, cid]))


def example_input(spec: dict[str, Any], device: torch.device) -> torch.Tensor:
    """One input example of the shape the task feeds the model (``Task.model_spec``)."""
    if "image_shape" in spec:
        return torch.zeros(1, *spec["image_shape"], device=device)
    if "input_dim" in spec:
        return torch.zeros(1, spec["input_dim"], device=device)
    raise ConfigError("compute.flops", "counted needs a task that feeds the model images or "
                      "vectors; for a language model state compute.flops_per_step")


def count_flops_per_example(model: torch.nn.Module, spec: dict[str, Any]) -> int:
    """Forward + backward FLOPs of one training example, as torch's FlopCounterMode counts
    them (matrix products and convolutions; the backward pass computes the gradients of
    the trainable weights and of every activation that leads to one, not of the input).
    ``torch.autograd.grad`` leaves the model's ``.grad`` untouched."""
    from torch.utils.flop_counter import FlopCounterMode

    weights = [p for p in model.parameters() if p.requires_grad]
    device = weights[0].device if weights else torch.device("cpu")
    with FlopCounterMode(display=False) as counter:
        out = model(example_input(spec, device))
        if weights:
            torch.autograd.grad(out.sum(), weights)
    return int(counter.get_total_flops())


def charged_step_flops(cfg: ComputeConfig, num_parameters: int, strategy_cfg: StrategyConfig,
                       flops_per_example: int | None = None) -> tuple[float, str]:
    """FLOPs charged per optimisation step and where the figure came from."""
    batch = strategy_cfg.examples_per_step()
    if cfg.flops_per_step is not None:
        return cfg.flops_per_step, "flops_per_step"
    if cfg.flops == "counted":
        if flops_per_example is None:
            raise ValueError("compute.flops=counted: pass the model's flops_per_example")
        return float(flops_per_example * batch), "counted"
    return 6.0 * num_parameters * batch, "6nb fallback"


class ComputeClock:
    """Turns what a client did in a phase into simulated seconds."""

    def __init__(self, cfg: ComputeConfig, seed: int, cids: list[int], model: torch.nn.Module,
                 spec: dict[str, Any], strategy_cfg: StrategyConfig) -> None:
        self.mode = cfg.mode
        self.speed = {cid: speed_factor(cfg, seed, cid) for cid in cids}
        counted = None
        if cfg.mode == "modelled" and cfg.flops == "counted" and cfg.flops_per_step is None:
            counted = count_flops_per_example(model, spec)
        self.flops_per_step, self.flops_source = charged_step_flops(
            cfg, sum(p.numel() for p in model.parameters()), strategy_cfg, counted)
        self.seconds_per_step = self.flops_per_step / (cfg.device_tflops * 1e12)

    def record(self) -> dict[str, Any]:
        """What the run summary keeps of the charge: the FLOPs of one step and their
        source (``flops_per_step``, ``counted`` or ``6nb fallback``); nothing unless the
        clock models compute from FLOPs."""
        if self.mode != "modelled":
            return {}
        return {"compute_flops_per_step": self.flops_per_step,
                "compute_flops_source": self.flops_source}

    def seconds(self, cid: int, steps: float, wall_s: float) -> float:
        if self.mode == "measured":
            return wall_s / self.speed[cid]
        if self.mode == "modelled":
            return steps * self.seconds_per_step / self.speed[cid]
        return 0.0
