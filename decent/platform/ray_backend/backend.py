"""``backend: ray`` — clients hosted in groups on ClientActors, messages routed by a
Coordinator actor. The driver only orchestrates phases and collects small statistics."""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
import ray
import torch

from decent.core.errors import ActorLost
from decent.core.stats import Stat
from decent.network.membership import ChurnConfig, Membership
from decent.network.router import RoundTraffic
from decent.platform.config import RayConfig, RunConfig
from decent.platform.evaluation import combine, joiners, mean_model
from decent.platform.plan import RunPlan, build_plan, check_churn

# Embedded (laptop) Ray: keep its traffic on 127.0.0.1, send no usage statistics, and do
# not turn on token auth (which would also write ~/.ray/auth_token and so switch auth on
# for every later `ray start` on this machine). Never applied when joining a cluster.
LOCAL_RAY_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "disabled",
}


def connect(rc: RayConfig) -> bool:
    """Attach to Ray; True if this call started it (and so should shut it down).

    With no address and no ``RAY_ADDRESS`` (which ``ray job submit`` sets) an embedded
    single-machine Ray is started, without dashboard."""
    if ray.is_initialized():
        return False
    address = rc.address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address)
        return True
    for key, value in LOCAL_RAY_ENV.items():
        os.environ.setdefault(key, value)
    ray.init(
        num_cpus=rc.num_cpus or os.cpu_count(),
        include_dashboard=False,
        object_store_memory=rc.object_store_mb * 2**20,
    )
    return True


def placement(n: int, clients_per_actor: int) -> list[list[int]]:
    """Contiguous groups of clients, one per actor."""
    actors = math.ceil(n / clients_per_actor)
    return [list(range(a * clients_per_actor, min(n, (a + 1) * clients_per_actor)))
            for a in range(actors)]


class RayBackend:
    def __init__(self, cfg: RunConfig, plan: RunPlan | None = None) -> None:
        from decent.platform.ray_backend.client_actor import ClientActor
        from decent.platform.ray_backend.coordinator import Coordinator

        self.cfg = cfg
        plan = plan or build_plan(cfg)
        self.strategy = plan.strategy  # the driver needs its phases
        self.topology = plan.topology
        # the driver owns who takes part: the schedule, and the clients of actors that die
        self.membership = plan.membership
        self.dead: set[int] = set()  # indices of actors lost for real
        self.lost: dict[int, int] = {}  # their clients → the round they were lost in
        self.started_ray = connect(cfg.ray)
        self.groups = placement(cfg.n, cfg.ray.clients_per_actor)
        self.coordinator = Coordinator.remote(cfg, self.groups)
        rc = cfg.ray
        self.actors = [
            ClientActor.options(num_cpus=rc.num_cpus_per_actor, num_gpus=rc.num_gpus_per_actor)
            .remote(cfg, cids, self.coordinator, rc.num_gpus_per_actor > 0)
            for cids in self.groups
        ]
        try:
            ray.get([a.ready.remote() for a in self.actors])  # surface build errors now
        except Exception:
            self.close()
            raise
        self._inboxes: list[ray.ObjectRef | None] = [None] * len(self.actors)
        self.max_edge_bytes_total = 0

    def live(self) -> list[int]:
        return [i for i in range(len(self.actors)) if i not in self.dead]

    def actor_of(self, cid: int) -> int:
        return next(i for i, cids in enumerate(self.groups) if cid in cids)

    def run_round(self, round_: int) -> tuple[dict[int, dict[str, Stat]], RoundTraffic]:
        members = None if self.membership is None else self.membership.at(round_)
        ray.get(self.coordinator.begin_round.remote(None if members is None
                                                    else members.present))
        for joiner, givers in joiners(self.topology, round_, members):
            if self.strategy.pulls_on_join:  # it fetches its model itself, in messages
                ray.get(self.actors[self.actor_of(joiner)].bootstrap.remote(joiner, None))
                continue
            vectors: dict[int, np.ndarray] = {}
            for part in ray.get([self.actors[i].vectors.remote([g for g in givers
                                                                if g in self.groups[i]])
                                 for i in sorted({self.actor_of(g) for g in givers})]):
                vectors.update(part)
            mean = mean_model([vectors[g] for g in givers], len(givers))
            ray.get(self.actors[self.actor_of(joiner)].bootstrap.remote(joiner, mean))
            ray.get([self.coordinator.account.remote(g, joiner, 4 * mean.size)
                     for g in givers])
        stats: dict[int, dict[str, Stat]] = {}
        for step, phase in enumerate(self.strategy.phases(round_)):
            calls = {i: self.actors[i].run_phase.remote(round_, step, phase, self._inboxes[i],
                                                        members)
                     for i in self.live()}
            for i, call in calls.items():
                try:
                    group_stats = ray.get(call)
                except ray.exceptions.RayActorError:
                    self.lose(i, round_)
                    continue
                for cid, s in group_stats.items():
                    stats.setdefault(cid, {}).update(s)
            self._inboxes = ray.get(self.coordinator.advance.remote())
        traffic, self.max_edge_bytes_total = ray.get(self.coordinator.end_round.remote())
        return stats, traffic

    def lose(self, actor: int, round_: int) -> None:
        """An actor died for real: its clients crashed in this round. The run goes on
        without them if the method can; otherwise it stops with one line."""
        if self.cfg.ray.on_actor_death == "restart":
            raise ActorLost(f"the actor hosting clients {self.groups[actor]} died in round "
                            f"{round_}")
        self.dead.add(actor)
        clients = set(self.groups[actor])
        for cid in sorted(clients):
            check_churn(self.strategy, cid, "crash", round_)
        self.lost.update({cid: round_ for cid in clients})
        # the rest of this round, messages to them come back to their senders
        # (and what they were handed this phase but never read goes back too)
        ray.get(self.coordinator.depart.remote(frozenset(clients), self._inboxes[actor]))
        if self.membership is None:
            self.membership = Membership.plan(ChurnConfig(), self.cfg.n, self.cfg.rounds,
                                              self.cfg.seed)
        self.membership.crash(clients, round_)

    def edge_bytes_total(self) -> dict[tuple[int, int], int]:
        return ray.get(self.coordinator.edge_bytes_total.remote())

    def present(self, round_: int) -> list[int] | None:
        """The clients whose state the round's metrics cover (None: all)."""
        if self.membership is None:
            return None
        return sorted(set(self.membership.at(round_).present) - set(self.lost))

    def evaluate(self, per_client: bool, present: list[int] | None = None) -> dict[str, float]:
        lost = {c for i in self.dead for c in self.groups[i]}
        keep = set(range(self.cfg.n) if present is None else present) - lost
        live = self.live()
        parts = [sorted(c for c in self.groups[i] if c in keep) for i in live]
        mean = mean_model(ray.get([self.actors[i].param_sum.remote(cids)
                                   for i, cids in zip(live, parts, strict=True)]), len(keep))
        mean_ref = ray.put(mean)
        reports = ray.get([self.actors[i].evaluate.remote(mean_ref, k == 0, per_client, cids)
                           for k, (i, cids) in enumerate(zip(live, parts, strict=True))])
        return combine(reports)

    def save_state(self) -> dict[str, Any]:
        from decent.platform.ray_backend import transport

        clients: dict[int, Any] = {}
        process = None
        live = self.live()
        for part, proc in ray.get([self.actors[i].save.remote(k == 0)
                                   for k, i in enumerate(live)]):
            clients.update(part)
            process = process if proc is None else proc
        router = ray.get(self.coordinator.save_router.remote())
        ready: dict[int, list] = {}
        for ref in self._inboxes:
            if ref is not None:
                ready.update(transport.receive(ray.get(ref), torch.device("cpu")))
        router["ready"] = {cid: msgs for cid, msgs in ready.items() if msgs}
        return {"clients": clients, "process": process, "router": router,
                "lost": dict(self.lost)}

    def load_state(self, state: dict[str, Any]) -> None:
        from decent.platform.ray_backend import transport

        ray.get([a.load.remote({cid: state["clients"][cid] for cid in cids
                                if cid in state["clients"]}, state["process"])
                 for a, cids in zip(self.actors, self.groups, strict=True)])
        for cid, round_ in state.get("lost", {}).items():  # lost before the checkpoint
            if self.membership is None:
                self.membership = Membership.plan(ChurnConfig(), self.cfg.n, self.cfg.rounds,
                                                  self.cfg.seed)
            self.membership.crash({cid}, round_)
            self.lost[cid] = round_
        ray.get(self.coordinator.load_router.remote(state["router"]))
        ready = state["router"]["ready"]
        self._inboxes = [ray.put({cid: transport.send(ready.get(cid, [])) for cid in cids})
                         for cids in self.groups]

    def client_vectors(self) -> dict[int, np.ndarray]:
        out: dict[int, np.ndarray] = {}
        for part in ray.get([self.actors[i].client_vectors.remote() for i in self.live()]):
            out.update(part)
        return out

    def close(self) -> None:
        for actor in self.actors:
            ray.kill(actor)
        ray.kill(self.coordinator)
        self.actors = []
        if self.started_ray:
            ray.shutdown()
            self.started_ray = False
