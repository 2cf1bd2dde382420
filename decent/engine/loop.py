"""The round loop: one engine for every backend.

Each round the :class:`Engine` admits joining clients (their neighbours' mean model, or
their own pulls), then runs the strategy's phases: it hands every host its clients'
inboxes, asks the executor to run the phase there, and routes what comes back through the
one :class:`~decent.network.router.Router` (edge checks, byte counts, wire faults, the
simulated clock). Evaluation and checkpoints read the hosts through the executor too, so
a feature that touches a round is written here once; an executor (in this process, or Ray
actors) only runs groups of clients where they live and moves their payloads.

A host lost in any executor call (:class:`~decent.core.errors.HostsLost`) goes through
:meth:`Engine.lose`: under the executor's ``churn`` policy its clients crash and the run
goes on without them (a call that only reads is asked again of the survivors); under
``restart``, or where the executor cannot go on without it, :class:`ActorLost` sends
the run back to its checkpoint."""

from __future__ import annotations

import copy
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import numpy as np

from decent.core.errors import ActorLost, HostsLost
from decent.core.messages import Message
from decent.core.stats import Stat
from decent.engine.config import RunConfig
from decent.engine.evaluation import combine, joiners, mean_model
from decent.engine.executor import Executor, Inboxes
from decent.engine.plan import RunPlan, check_churn
from decent.network.membership import ChurnConfig, Membership
from decent.network.router import RoundTraffic, Router
from decent.robust.omniscient import rewrite

T = TypeVar("T")


class Engine:
    """One run's rounds over ``executor``, from the ``plan`` the runner built."""

    def __init__(self, cfg: RunConfig, plan: RunPlan, executor: Executor) -> None:
        self.cfg = cfg
        self.plan = plan
        self.executor = executor
        self.strategy = plan.strategy  # the engine needs its phases
        self.topology = plan.topology
        self.router = Router(plan.topology, self.strategy.name, plan.network,
                             plan.wire_faults)
        # who takes part: the churn schedule, and the clients of hosts lost for real (a
        # copy: a crash written into it must not outlive this engine, e.g. on a restart)
        self.membership: Membership | None = copy.deepcopy(plan.membership)
        self.dead: set[int] = set()  # hosts lost for real
        # an attack that reads the honest payloads of each phase (alie, ipm, dissensus)
        self.omniscient = bool(cfg.faults.byzantine) and cfg.faults.attack.OMNISCIENT
        self.lost: dict[int, int] = {}  # their clients → the round they were lost in
        # the round running, or the last one run (-1: none yet): a host lost between
        # rounds (evaluating, saving) is lost in the round just run
        self.current_round = -1
        # each host lost for real: round, clients, node (the summary's actor_losses)
        self.losses: list[dict[str, Any]] = []
        # each client's node where the executor spans nodes (Ray), for the bytes of
        # messages that crossed from one node to another (never those within a node)
        placed = executor.layout.get("ray_actor_nodes", {})
        self.node_of = {cid: a["node"] for a in placed.values() for cid in a["clients"]}
        self.bytes_cross_node = 0

    # ------------------------------------------------------------------ the round
    def run_round(self, round_: int) -> tuple[dict[int, dict[str, Stat]], RoundTraffic]:
        self.current_round = round_
        members = None if self.membership is None else self.membership.at(round_)
        self.router.begin_round(None if members is None else members.present)
        for joiner, givers in joiners(self.topology, round_, members):
            self.surviving(partial(self.join, joiner, givers), within_round=True)
        stats: dict[int, dict[str, Stat]] = {}
        for step, phase in enumerate(self.strategy.phases(round_)):
            inboxes = {h: self.router.take(self.executor.groups[h]) for h in self.live()}
            try:
                results = self.executor.run_phase(round_, step, phase, inboxes, members)
            except HostsLost as lost:  # a phase runs once: the survivors' results stand
                results = lost.partial
            if self.omniscient:
                self.attack_with_the_round(round_, results)
            for host, inbox in inboxes.items():  # in host order
                result = results.get(host)
                if result is None:
                    self.lose(host, round_, inbox)
                    continue
                self.router.post(round_, phase, result.outgoing, result.compute)
                if self.node_of:
                    self.bytes_cross_node += sum(
                        m.nbytes for m in result.outgoing
                        if self.node_of[m.src] != self.node_of[m.dst])
                for cid, recorded in result.stats.items():
                    stats.setdefault(cid, {}).update(recorded)
            self.router.advance()
            self.executor.settle(self.router.in_flight())
        return stats, self.router.end_round()

    def attack_with_the_round(self, round_: int, results: dict[int, Any]) -> None:
        """The Byzantine payloads of an omniscient attack (``faults.attack``), made from
        the honest payloads of this phase (:mod:`decent.robust.omniscient`): every
        payload is read, wherever it lives, and the attackers' are handed back."""
        sent = [m for r in results.values() for m in r.outgoing]
        byzantine = frozenset(self.cfg.faults.byzantine)
        if not any(m.src in byzantine for m in sent):
            return
        [readable] = self.executor.storable({0: sent})
        made = rewrite(self.cfg.faults.attack, readable[0], byzantine,
                       self.topology.round_graph(round_), self.cfg.n)
        [routable] = self.executor.routable({0: made})
        new = {(m.src, m.seq, m.dst): m.payload for m in routable[0]}
        for r in results.values():
            for m in r.outgoing:
                if m.src in byzantine:
                    m.payload = new[(m.src, m.seq, m.dst)]

    def join(self, joiner: int, givers: list[int]) -> None:
        """Bootstrap ``joiner`` from its neighbours' mean model, of those of ``givers``
        not lost (or let it pull its model itself, in messages)."""
        if joiner in self.lost:  # its host died during this round's joins
            return
        if self.strategy.pulls_on_join:  # it fetches its model itself, in messages
            self.executor.bootstrap(joiner, None)
            return
        givers = [g for g in givers if g not in self.lost]
        if not givers:  # all lost: as a joiner with no neighbour present, it keeps its own
            return
        vectors = self.executor.vectors(givers)
        mean = mean_model([vectors[g] for g in givers], len(givers))
        self.executor.bootstrap(joiner, mean)
        for giver in givers:  # each sends its model: counted like any message
            self.router.account(giver, joiner, 4 * mean.size)

    def live(self) -> list[int]:
        return [h for h in range(len(self.executor.groups)) if h not in self.dead]

    def surviving(self, call: Callable[[], T], within_round: bool = False) -> T:
        """``call()`` (an executor call that only reads, or a join); every host lost
        during it is lost for real in the current round (:meth:`lose`), and the call is
        made again over the survivors."""
        while True:
            try:
                return call()
            except HostsLost as lost:
                for host in lost.hosts:
                    # the mail waiting for its clients: within a round it goes back to its
                    # senders, as a phase's unread inbox does; between rounds it is
                    # dropped, as for a client the churn schedule removes there (returned
                    # mail would wait in the round's posted queue, which no checkpoint
                    # holds: a checkpoint is taken between rounds)
                    unread = self.router.take(self.executor.groups[host])
                    self.lose(host, self.current_round, unread if within_round else None)

    def lose(self, host: int, round_: int, unread: Inboxes | None = None) -> None:
        """A host died for real: its clients crashed in round ``round_`` (-1: before the
        first), gone from the next. The run goes on without them if the method and the
        executor can; otherwise back to the checkpoint (``ActorLost``) or, for a method
        that cannot lose clients, one line. ``unread`` is the inbox bundle it was handed
        and never read: it goes back to its senders."""
        clients = self.executor.groups[host]
        when = f"in round {round_}" if round_ >= 0 else "before the first round"
        placed = self.executor.layout.get("ray_actor_nodes", {}).get(str(host), {})
        loss = {"round": round_, "clients": list(clients), "node": placed.get("node")}
        if self.executor.loss_policy.on_loss == "restart":
            raise ActorLost(f"the actor hosting clients {clients} died {when}",
                            {**loss, "then": "restart"})
        self.losses.append({**loss, "then": "crash"})
        self.dead.add(host)
        if not self.live():  # nobody left to go on with: back to the checkpoint
            raise ActorLost(f"every actor of the run has died (the last {when})")
        for cid in clients:
            check_churn(self.strategy, cid, "crash", round_)
        self.crash(set(clients), round_)
        # the rest of this round, messages to them come back to their senders
        # (and what they were handed this phase but never read goes back too)
        self.router.depart(frozenset(clients), unread)

    def crash(self, clients: set[int], round_: int) -> None:
        if self.membership is None:
            self.membership = Membership.plan(ChurnConfig(), self.cfg.n, self.cfg.rounds,
                                              self.cfg.seed)
        self.membership.crash(clients, round_)
        self.lost.update({cid: round_ for cid in clients})

    def record_messages(self) -> list[Message]:
        """From now on, every message the router accepts (what crossed the network, sized),
        appended to the returned list: for checks of payloads and bytes."""
        posted: list[Message] = []
        post = self.router.post

        def recording(round_: int, phase: str, messages: Any, compute: Any = None) -> None:
            messages = list(messages)
            posted.extend(messages)
            post(round_, phase, messages, compute)

        self.router.post = recording  # type: ignore[method-assign]
        return posted

    # ------------------------------------------------------------------ what the run reads
    def present(self, round_: int) -> list[int] | None:
        """The clients whose state the round's metrics cover (None: all)."""
        if self.membership is None:
            return None
        return sorted(set(self.membership.at(round_).present) - set(self.lost))

    def evaluate(self, per_client: bool, present: list[int] | None = None) -> dict[str, float]:
        """The metrics of the clients ``present`` (None: all) not lost. A host lost during
        the evaluation is lost in the round just run and the evaluation is made over the
        survivors; the metrics then say so: ``evaluated_clients`` (how many it covered)
        and ``live_clients`` (how many are left: it replaces the count the runner took
        before evaluating)."""
        lost_before = len(self.lost)
        metrics, evaluated = self.surviving(partial(self._evaluate, per_client, present))
        if len(self.lost) > lost_before:
            metrics["evaluated_clients"] = evaluated
            metrics["live_clients"] = len(self.present(max(self.current_round, 0)) or ())
        return metrics

    def _evaluate(self, per_client: bool, present: list[int] | None
                  ) -> tuple[dict[str, float], int]:
        keep = set(range(self.cfg.n) if present is None else present) - set(self.lost)
        if self.cfg.eval.honest_only:
            keep -= set(self.cfg.faults.byzantine)
        parts = {h: [c for c in self.executor.groups[h] if c in keep] for h in self.live()}
        mean = mean_model(self.executor.param_sums(parts), len(keep))
        return combine(self.executor.evaluate(mean, per_client, parts)), len(keep)

    def client_vectors(self) -> dict[int, np.ndarray]:
        return self.surviving(lambda: self.executor.client_vectors(self.live()))

    def edge_bytes_total(self) -> dict[tuple[int, int], int]:
        return dict(self.router.total_edge_bytes)

    @property
    def max_edge_bytes_total(self) -> int:
        return self.router.max_edge_bytes_total

    @property
    def layout(self) -> dict[str, Any]:
        return self.executor.layout

    @property
    def compute_charge(self) -> dict[str, Any]:
        return self.executor.compute_charge

    @property
    def group(self) -> Any:
        """The client group of an in-process executor (for tests and notebooks that look
        at clients directly)."""
        return self.executor.group  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ checkpoints
    def save_state(self) -> dict[str, Any]:
        """Everything the run needs to go on from here. A host lost while saving is lost
        in the round just run (its clients crash: ``lost`` records them) and the
        survivors are saved again: a checkpoint is whole, never half of one."""
        return self.surviving(self._save_state)

    def _save_state(self) -> dict[str, Any]:
        clients, process = self.executor.save(self.live())
        router = self.router.save()
        ready, later = self.executor.storable(router["ready"], router["later"])
        router["ready"] = {cid: msgs for cid, msgs in ready.items() if msgs}
        router["later"] = later
        return {"clients": clients, "process": process, "router": router,
                "lost": dict(self.lost)}

    def load_state(self, state: dict[str, Any]) -> None:
        try:
            self.executor.load(state["clients"], state["process"])
        except HostsLost as lost:
            # a checkpoint loads whole or not at all, whatever ray.on_actor_death says:
            # the runner builds the engine again and loads it again on fresh hosts
            clients = [c for h in lost.hosts for c in self.executor.groups[h]]
            raise ActorLost(f"the actor hosting clients {clients} died while the "
                            "checkpoint loaded") from lost
        for cid, round_ in state.get("lost", {}).items():  # lost before the checkpoint
            self.crash({cid}, round_)
        router = dict(state["router"])
        router["ready"], router["later"] = self.executor.routable(router["ready"],
                                                                   router["later"])
        self.router.load(router)

    def close(self) -> None:
        self.executor.close()
