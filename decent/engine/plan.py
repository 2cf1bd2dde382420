"""What the runner builds once from a validated config: the topology, the strategy and
the network model (whose link and node tables may come from files).

The runner builds the plan once, while it checks the config (a strategy refuses a graph
it cannot run on from its constructor), and passes it down: to the engine, to the client
group of the local executor, and, pickled once into the object store, to every Ray
actor; no layer below builds its own."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from decent.core.errors import ConfigError
from decent.core.graph import GraphFacts
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
    facts = topology.facts()
    check_graph(STRATEGIES.entry(cfg.strategy.name).build, facts)
    strategy = STRATEGIES.entry(cfg.strategy.name).build(cfg.strategy, facts)
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


def check_graph(method: Any, facts: GraphFacts) -> None:
    """One line where the method cannot run on the graph: a directed graph for a method
    that gossips both ways, or a graph some client cannot reach for push-sum."""
    name = getattr(method, "name", method.__name__)
    if facts.directed and not getattr(method, "directed_graphs", False):
        raise ConfigError("topology.name", f"{facts.name} is a directed graph and strategy "
                          f"'{name}' exchanges along edges both ways: use an undirected "
                          "topology, or a push-sum method (sgp, osgp)")
    if getattr(method, "needs_strong_connectivity", False) and facts.strongly_connected is False:
        raise ConfigError("topology", f"strategy '{name}' needs every client to reach every "
                          f"other along directed edges, and this {facts.name} graph has "
                          "clients that never hear from some others: add edges (e.g. "
                          "topology.name=directed_exponential)")


def check_churn(strategy: Strategy, client: int, kind: str, round_: int) -> None:
    """One line if the method cannot go on without ``client``."""
    problem = strategy.churn_problem(client, kind)
    if problem is not None:
        verb = {"leave": "leaves", "crash": "crashes"}.get(kind, kind)
        raise ConfigError("churn", f"client {client} {verb} at round {round_}, but strategy "
                          f"'{strategy.name}' cannot run with clients leaving: {problem}")
