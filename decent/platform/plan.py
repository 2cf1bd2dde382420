"""What every process builds once from a validated config: the topology, the strategy and
the network model (whose link and node tables may come from files).

The driver builds a plan to check a config (a strategy refuses a graph it cannot run on
from its constructor) and runs the local backend with that same plan; each Ray actor
process builds its own, once."""

from __future__ import annotations

from dataclasses import dataclass

from decent.network.faults import WireFaults, byzantine_clients
from decent.network.timing import Network
from decent.platform.config import RunConfig
from decent.strategies.base import Strategy
from decent.strategies.registry import STRATEGIES
from decent.topologies import Topology, build_topology


@dataclass(frozen=True)
class RunPlan:
    topology: Topology
    strategy: Strategy
    network: Network
    wire_faults: WireFaults | None  # None: a clean wire
    byzantine: list[int]  # clients whose outgoing payloads are attacked


def build_plan(cfg: RunConfig) -> RunPlan:
    topology = build_topology(cfg.topology)
    strategy = STRATEGIES.entry(cfg.strategy.name).build(cfg.strategy, topology.facts())
    faults = cfg.faults
    wire = WireFaults(faults, cfg.n, cfg.seed) if faults.on_the_wire else None
    byzantine = byzantine_clients(faults, cfg.seed, strategy.data_holders())
    return RunPlan(topology, strategy, Network(cfg.network, cfg.n, cfg.seed), wire, byzantine)
