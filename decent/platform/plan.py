"""What every process builds once from a validated config: the topology and the strategy.

The driver builds a plan to check a config (a strategy refuses a graph it cannot run on
from its constructor) and runs the local backend with that same plan; each Ray actor
process builds its own, once."""

from __future__ import annotations

from dataclasses import dataclass

from decent.platform.config import RunConfig
from decent.strategies.base import Strategy
from decent.strategies.registry import STRATEGIES
from decent.topologies import Topology, build_topology


@dataclass(frozen=True)
class RunPlan:
    topology: Topology
    strategy: Strategy


def build_plan(cfg: RunConfig) -> RunPlan:
    topology = build_topology(cfg.topology)
    strategy = STRATEGIES.entry(cfg.strategy.name).build(cfg.strategy, topology.facts())
    return RunPlan(topology, strategy)
