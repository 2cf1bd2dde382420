"""Edge enforcement, byte accounting and deterministic inboxes.

The router is the one place messages pass between clients. The local backend owns one
in-process; on Ray the Coordinator actor (:mod:`decent.platform.ray_backend.coordinator`)
wraps one.
Messages posted during a phase are held back until every client has finished that
phase (:meth:`Router.advance`), then become the inboxes of the next phase.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from decent.core.errors import StrategyError
from decent.core.messages import Message
from decent.network.timing import NetworkConfig, phase_time
from decent.topologies import Topology


@dataclass
class RoundTraffic:
    """What crossed the network in one round."""

    bytes: int = 0
    messages: int = 0
    max_edge_bytes: int = 0
    sim_time_s: float = 0.0
    edge_bytes: dict[tuple[int, int], int] = field(default_factory=dict)


class Router:
    """Checks that every message follows an edge of the round's graph, counts its wire
    bytes per directed edge, and files it in its destination's next inbox."""

    def __init__(self, topology: Topology, strategy_name: str, network: NetworkConfig) -> None:
        self.topology = topology
        self.strategy_name = strategy_name
        self.network = network
        self._pending: dict[int, list[Message]] = defaultdict(list)
        self._ready: dict[int, list[Message]] = {}
        self._phase_edges: dict[tuple[int, int], int] = defaultdict(int)
        self._round = RoundTraffic()
        self.total_edge_bytes: dict[tuple[int, int], int] = defaultdict(int)
        self.total_bytes = 0

    def post(self, round_: int, phase: str, messages: Iterable[Message]) -> None:
        """Accept one phase's outgoing messages of some clients (sizes already set)."""
        graph = self.topology.round_graph(round_)
        for msg in messages:
            if not graph.has_edge(msg.src, msg.dst):
                raise StrategyError(
                    f"strategy '{self.strategy_name}' sent a message from client {msg.src} "
                    f"to client {msg.dst} in round {round_}, phase '{phase}', but "
                    f"({msg.src}, {msg.dst}) is not an edge of that round's "
                    f"{self.topology.name} graph"
                )
            self._pending[msg.dst].append(msg)
            self._phase_edges[(msg.src, msg.dst)] += msg.nbytes
            self._round.messages += 1

    def advance(self) -> None:
        """Close the phase: posted messages become the inboxes of the next phase."""
        self._ready = {
            dst: sorted(msgs, key=lambda m: (m.src, m.seq)) for dst, msgs in self._pending.items()
        }
        self._pending = defaultdict(list)
        edges = self._phase_edges
        self._round.sim_time_s += phase_time(edges, self.network)
        for edge, nbytes in edges.items():
            self._round.edge_bytes[edge] = self._round.edge_bytes.get(edge, 0) + nbytes
            self.total_edge_bytes[edge] += nbytes
        self._phase_edges = defaultdict(int)

    def take(self, cids: Iterable[int]) -> dict[int, list[Message]]:
        """Hand out (and forget) the inboxes of ``cids``; a client with no mail gets []."""
        return {cid: self._ready.pop(cid, []) for cid in cids}

    def end_round(self) -> RoundTraffic:
        """Totals of the round that just ended; starts counting the next one."""
        traffic = self._round
        traffic.bytes = sum(traffic.edge_bytes.values())
        traffic.max_edge_bytes = max(traffic.edge_bytes.values(), default=0)
        self.total_bytes += traffic.bytes
        self._round = RoundTraffic()
        return traffic

    @property
    def max_edge_bytes_total(self) -> int:
        return max(self.total_edge_bytes.values(), default=0)
