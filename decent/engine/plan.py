"""What the runner builds once from a validated config: the topology, the strategy and
the network model (whose link and node tables may come from files).

The runner builds the plan once, while it checks the config (a strategy refuses a graph
it cannot run on from its constructor), and passes it down: to the engine, to the client
group of the local executor, and, pickled once into the object store, to every Ray
actor; no layer below builds its own."""

from __future__ import annotations

from dataclasses import dataclass

from decent.core.errors import ConfigError
from decent.engine.config import RunConfig
from decent.network.faults import WireFaults, byzantine_clients
from decent.network.membership import Membership
from decent.network.timing import Network
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
    membership: Membership | None  # None: every client, every round


def build_plan(cfg: RunConfig) -> RunPlan:
    network = Network(cfg.network, cfg.n, cfg.seed)
    topology = build_topology(cfg.topology, lambda i, j: network.link(i, j)[1])
    strategy = STRATEGIES.entry(cfg.strategy.name).build(cfg.strategy, topology.facts())
    faults = cfg.faults
    wire = WireFaults(faults, cfg.n, cfg.seed) if faults.on_the_wire else None
    byzantine = byzantine_clients(faults, cfg.seed, strategy.data_holders())
    membership = None
    if cfg.churn.active:
        membership = Membership.plan(cfg.churn, cfg.n, cfg.rounds, cfg.seed)
        for r, members in enumerate(membership.rounds):
            for client, kind in members.departed:
                check_churn(strategy, client, kind, r)
    return RunPlan(topology, strategy, network, wire, byzantine, membership)


def check_churn(strategy: Strategy, client: int, kind: str, round_: int) -> None:
    """One line if the method cannot go on without ``client``."""
    problem = strategy.churn_problem(client, kind)
    if problem is not None:
        verb = {"leave": "leaves", "crash": "crashes"}.get(kind, kind)
        raise ConfigError("churn", f"client {client} {verb} at round {round_}, but strategy "
                          f"'{strategy.name}' cannot run with clients leaving: {problem}")
