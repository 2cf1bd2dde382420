"""Edge enforcement, byte accounting and deterministic inboxes.

The router is the one place messages pass between clients. The local backend owns one
in-process; on Ray the driver (:mod:`decent.backends.ray.executor`) owns one and
routes the actors' outboxes through it.
Messages posted during a phase are held back until every client has finished that
phase (:meth:`Router.advance`), then become the inboxes of the next phase. Injected wire
faults (:mod:`decent.network.faults`) act here: a message may be refused at a partition,
lost, or held back for some phases.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from decent.core.errors import PhaseError
from decent.core.messages import Message
from decent.network.faults import WireFaults
from decent.network.timing import Network
from decent.topologies import Topology


@dataclass
class RoundTraffic:
    """What crossed the network in one round."""

    bytes: int = 0
    messages: int = 0
    max_edge_bytes: int = 0
    sim_time_s: float = 0.0
    sim_compute_s: float = 0.0  # the slowest client's compute, summed over phases
    sim_comm_s: float = 0.0  # the rest: communication on each phase's critical path
    dropped_messages: int = 0  # lost on the wire (their bytes were sent)
    delayed_messages: int = 0  # held back some phases
    partitioned_messages: int = 0  # refused at a partition (not sent)
    undeliverable_messages: int = 0  # addressed to a client not present: returned
    edge_bytes: dict[tuple[int, int], int] = field(default_factory=dict)


class Router:
    """Checks that every message follows an edge of the round's graph, counts its wire
    bytes per directed edge, and files it in its destination's next inbox."""

    def __init__(self, topology: Topology, strategy_name: str, network: Network,
                 faults: WireFaults | None = None) -> None:
        self.topology = topology
        self.strategy_name = strategy_name
        self.network = network
        self.faults = faults
        self._compute: dict[int, float] = {}
        self._phase_no = 0  # phases closed since the run began
        self._step = 0  # position of the current phase in its round
        self._later: dict[int, list[Message]] = defaultdict(list)  # phase no. → delayed
        self._present: frozenset[int] | None = None  # None: every client
        self._pending: dict[int, list[Message]] = defaultdict(list)
        self._ready: dict[int, list[Message]] = {}
        self._phase_edges: dict[tuple[int, int], int] = defaultdict(int)
        # overlapped transfers (Message.overlap) posted this phase, by τ; and, by phase
        # number, the simulated time by which what that phase reads has arrived
        self._overlap_edges: dict[int, dict[tuple[int, int], int]] = {}
        self._due: dict[int, float] = {}
        self._clock = 0.0  # simulated seconds from the run's start to this phase's start
        self._round = RoundTraffic()
        self.total_edge_bytes: dict[tuple[int, int], int] = defaultdict(int)
        self.total_bytes = 0

    def begin_round(self, present: frozenset[int] | None) -> None:
        """The clients taking part in the round about to run (None: all of them)."""
        self._present = present

    def depart(self, clients: frozenset[int],
               unread: dict[int, list[Message]] | None = None) -> None:
        """``clients`` vanished during the current round (their process died): messages
        posted to them this phase, and any posted later this round, return to their
        senders undeliverable, as if they had never been present. ``unread`` is the inbox
        they were handed but never read: it returns to its senders too, a phase later
        than it would have, with its bytes counted (it was sent)."""
        gone = set(clients)
        for msgs in (unread or {}).values():
            for msg in msgs:
                if msg.dst in gone and msg.src not in gone and not msg.undeliverable:
                    self._round.undeliverable_messages += msg.items
                    msg.undeliverable = True
                    self._pending[msg.src].append(msg)
        if self._present is None:
            self._present = frozenset(range(self.topology.n)) - gone
        else:
            self._present = self._present - gone
        for dst in sorted(gone & set(self._pending)):
            for msg in self._pending.pop(dst):
                self._phase_edges[(msg.src, dst)] -= msg.nbytes
                if not self._phase_edges[(msg.src, dst)]:
                    del self._phase_edges[(msg.src, dst)]
                self._round.messages -= msg.items
                self._round.undeliverable_messages += msg.items
                msg.undeliverable = True
                self._pending[msg.src].append(msg)

    def account(self, src: int, dst: int, nbytes: int) -> None:
        """Traffic the platform itself sends this phase (a joining client's bootstrap)."""
        self._phase_edges[(src, dst)] += nbytes
        self._round.messages += 1

    def post(self, round_: int, phase: str, messages: Iterable[Message],
             compute: dict[int, float] | None = None) -> None:
        """Accept one phase's outgoing messages of some clients (sizes already set) and
        how long each of those clients computed before sending (simulated seconds)."""
        self._compute.update(compute or {})
        graph = self.topology.round_graph(round_)
        for msg in messages:
            if not graph.has_edge(msg.src, msg.dst):
                raise PhaseError(
                    self.strategy_name, phase, msg.src, round_,
                    f"message to client {msg.dst}, not a neighbour this round: "
                    f"({msg.src}, {msg.dst}) is not an edge of round {round_}'s "
                    f"{self.topology.name} graph")
            msg.sent_round, msg.sent_phase = round_, self._phase_no
            if self._present is not None and msg.dst not in self._present:
                # nobody there: the sender finds out in its next inbox
                self._round.undeliverable_messages += msg.items
                msg.undeliverable = True
                self._pending[msg.src].append(msg)
                continue
            lost, late = False, 0
            if self.faults is not None:
                if self.faults.cut(round_, msg.src, msg.dst):
                    self._round.partitioned_messages += msg.items
                    continue
                lost, late = self.faults.fate(round_, self._step, msg.src, msg.dst, msg.seq)
            if msg.overlap > 0:
                edges = self._overlap_edges.setdefault(msg.overlap, defaultdict(int))
                edges[(msg.src, msg.dst)] += msg.nbytes
            else:
                self._phase_edges[(msg.src, msg.dst)] += msg.nbytes
            self._round.messages += msg.items
            if lost:
                self._round.dropped_messages += msg.items
            elif late or msg.overlap > 1:
                self._round.delayed_messages += msg.items * int(late > 0)
                self._later[self._phase_no + max(msg.overlap, 1) + late].append(msg)
            else:
                self._pending[msg.dst].append(msg)

    def advance(self) -> None:
        """Close the phase: posted messages (and delayed ones now due) become the inboxes
        of the next phase, each sorted by (source, phase sent, sequence number)."""
        self._phase_no += 1
        self._step += 1
        for msg in self._later.pop(self._phase_no, []):
            self._pending[msg.dst].append(msg)
        self._ready = {
            dst: sorted(msgs, key=lambda m: (m.src, m.sent_phase, m.seq))
            for dst, msgs in self._pending.items()
        }
        self._pending = defaultdict(list)
        edges = self._phase_edges
        duration, compute = self.network.phase_time(edges, self._compute)
        # this phase read overlapped transfers: it waited for any still on the way
        wait = max(0.0, self._due.pop(self._phase_no - 1, 0.0) - self._clock)
        for tau, sent in sorted(self._overlap_edges.items()):
            # sent as the phase started (release 0), alongside its compute
            arrive, _ = self.network.phase_time(sent, {})
            due = self._phase_no - 1 + tau
            self._due[due] = max(self._due.get(due, 0.0), self._clock + wait + arrive)
            for edge, nbytes in sent.items():
                edges[edge] = edges.get(edge, 0) + nbytes
        duration += wait
        self._clock += duration
        self._round.sim_time_s += duration
        self._round.sim_compute_s += compute
        self._round.sim_comm_s += duration - compute
        self._compute = {}
        for edge, nbytes in edges.items():
            self._round.edge_bytes[edge] = self._round.edge_bytes.get(edge, 0) + nbytes
            self.total_edge_bytes[edge] += nbytes
        self._phase_edges = defaultdict(int)
        self._overlap_edges = {}

    def take(self, cids: Iterable[int]) -> dict[int, list[Message]]:
        """Hand out (and forget) the inboxes of ``cids``; a client with no mail gets []."""
        return {cid: self._ready.pop(cid, []) for cid in cids}

    def in_flight(self) -> Iterator[Message]:
        """Every message posted and not yet handed out (ready, delayed, or just posted)."""
        for queue in (self._ready, self._later, self._pending):
            for msgs in queue.values():
                yield from msgs

    def end_round(self) -> RoundTraffic:
        """Totals of the round that just ended; starts counting the next one."""
        traffic = self._round
        self._step = 0
        traffic.bytes = sum(traffic.edge_bytes.values())
        traffic.max_edge_bytes = max(traffic.edge_bytes.values(), default=0)
        self.total_bytes += traffic.bytes
        self._round = RoundTraffic()
        return traffic

    # ------------------------------------------------------------------ checkpoints
    def save(self) -> dict[str, Any]:
        """The router between two rounds: messages in flight (the next phase's inboxes,
        and delayed ones) and the run's counters. Payloads stay as they are; the caller
        makes them storable."""
        return {
            "ready": {dst: list(msgs) for dst, msgs in self._ready.items()},
            "later": {k: list(v) for k, v in self._later.items()},
            "phase_no": self._phase_no,
            "present": self._present,
            "total_edge_bytes": dict(self.total_edge_bytes),
            "total_bytes": self.total_bytes,
            # overlapped transfers still on the way: when each phase has what it reads
            "due": {"clock": self._clock, "phases": dict(self._due)},
        }

    def load(self, saved: dict[str, Any]) -> None:
        self._ready = {dst: list(msgs) for dst, msgs in saved["ready"].items()}
        self._later = defaultdict(list, {k: list(v) for k, v in saved["later"].items()})
        self._phase_no = saved["phase_no"]
        self._present = saved.get("present")
        self.total_edge_bytes = defaultdict(int, saved["total_edge_bytes"])
        self.total_bytes = saved["total_bytes"]
        due = saved.get("due") or {"clock": 0.0, "phases": {}}
        self._clock, self._due = float(due["clock"]), dict(due["phases"])

    @property
    def max_edge_bytes_total(self) -> int:
        return max(self.total_edge_bytes.values(), default=0)
