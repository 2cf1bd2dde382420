"""Compute time on the simulated clock: how long a client's part of a phase takes.

Three modes (``compute.mode``):

* ``none`` (default) — compute is free; a run's simulated time is its communication only,
  as in every result the README quoted before the clock had a compute part;
* ``measured`` — the wall time of the client's phase on its device, divided by the
  client's speed factor; real, but not reproducible (it depends on the machine's load);
* ``modelled`` — steps × ``flops_per_step`` / (``device_tflops``·10¹² × speed factor),
  with the steps the strategy charged (:meth:`~decent.strategies.base.Client.count_steps`:
  one local SGD step, one ZO estimate). Deterministic: the same on both backends.

Speed factors are drawn once per client from ``speed_spread`` (seeded by the run seed and
the client id, so whichever process hosts a client draws the same factor), or listed in
``speeds``: a heterogeneous fleet. ``flops_per_step`` defaults to 6·N·B, the forward +
backward cost of N parameters on a batch of B examples (Kaplan et al., 2020, §2.1); set
it for token-level accounting of language models.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from decent.core.schema import one_of, positive
from decent.network.timing import Spread

COMPUTE_MODES = ("none", "measured", "modelled")
SPEED_SALT = 0x7370  # keeps speed draws independent of every other per-client stream


@dataclass
class ComputeConfig:
    mode: str = one_of(COMPUTE_MODES, "none")
    flops_per_step: float | None = positive(None, nullable=True)  # None: 6·N·B
    device_tflops: float = positive(10.0)  # a client device's sustained throughput
    speed_spread: Spread = field(default_factory=Spread)
    speeds: list[float] = positive([], each=True)  # one factor per client; overrides spread


def speed_factor(cfg: ComputeConfig, seed: int, cid: int) -> float:
    if cfg.speeds:
        return float(cfg.speeds[cid])
    return cfg.speed_spread.draw(np.random.default_rng([seed, SPEED_SALT, cid]))


def step_flops(cfg: ComputeConfig, num_parameters: int, strategy_cfg: Any) -> float:
    """FLOPs charged per optimisation step."""
    if cfg.flops_per_step is not None:
        return cfg.flops_per_step
    return 6.0 * num_parameters * getattr(strategy_cfg, "batch_size", 1)


class ComputeClock:
    """Turns what a client did in a phase into simulated seconds."""

    def __init__(self, cfg: ComputeConfig, seed: int, cids: list[int], num_parameters: int,
                 strategy_cfg: Any) -> None:
        self.mode = cfg.mode
        self.speed = {cid: speed_factor(cfg, seed, cid) for cid in cids}
        self.seconds_per_step = step_flops(cfg, num_parameters, strategy_cfg) / (
            cfg.device_tflops * 1e12)

    def seconds(self, cid: int, steps: float, wall_s: float) -> float:
        if self.mode == "measured":
            return wall_s / self.speed[cid]
        if self.mode == "modelled":
            return steps * self.seconds_per_step / self.speed[cid]
        return 0.0
