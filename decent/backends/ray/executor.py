"""``backend: ray`` — the engine's executor whose hosts are ClientActors, each hosting a
group of clients; the engine, on the driver, routes.

Routing is bookkeeping on message headers: an edge check, a byte count and a sort. Payloads
of 64 KiB or more travel as object references put by their sender (:mod:`.transport`), so
the driver files references, never tensor data, and needs no router actor of its own (a
separate Coordinator process would import torch, ~300 MB, and add one call per actor and
one per phase). Each phase costs one call per actor: it takes the actor's inbox bundle and
returns its outbox, its compute times and its statistics."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import ray
import torch

from decent.backends.ray import direct, spread, transport, warm
from decent.backends.ray.losses import died, gather
from decent.backends.ray.memory_plan import (
    Footprint,
    MemoryPlan,
    available_mb,
    check_fits,
    plan_memory,
    probe_apart,
    probe_beside,
    process_memory_mb,
)
from decent.backends.ray.node_memory import Node, check_nodes
from decent.backends.ray.placement import groups_for
from decent.backends.ray.session import connect, shutdown
from decent.core.errors import ActorLost, ConfigError, HostsLost
from decent.core.messages import Message
from decent.engine.config import RunConfig
from decent.engine.executor import Inboxes, PhaseResult
from decent.engine.plan import RunPlan
from decent.network.membership import RoundMembers

# Models whose frozen weights are worth one copy per machine: the language models (a LoRA
# base, SubCGE's W, SPES's experts). The small built-in models freeze nothing.
FROZEN_WEIGHT_MODELS = ("causal_lm", "reward_model")


def shares_frozen_weights(cfg: RunConfig, actors: int) -> bool:
    """Whether the actors of this run map one copy of the frozen weights: CPU actors, more
    than one, a language model, ``ray.share_frozen`` on."""
    return (cfg.ray.share_frozen and actors > 1 and cfg.ray.num_gpus_per_actor == 0
            and cfg.device != "cuda" and cfg.model.name in FROZEN_WEIGHT_MODELS)


class RayActors:
    """The executor whose hosts are ClientActors, one per group of clients: it places
    them, moves payloads between them (object store or RDT) and reports an actor that
    died, in whichever call, as a lost host (:class:`HostsLost`). One that dies while
    the actors start is :class:`ActorLost`: there is no run to go on without it yet, so
    the runner builds the engine again (back to the checkpoint, or the start)."""

    def __init__(self, cfg: RunConfig, plan: RunPlan) -> None:
        from decent.backends.ray.client_actor import ClientActor, DirectClientActor

        self.cfg = cfg
        transport.send_by_value(cfg.imports)  # before anything pickles the plan
        self.dead: set[int] = set()  # actors that died: never called again
        # messages whose payloads were lost with their sender's actor, never delivered
        self.messages_lost = 0
        rc = cfg.ray
        free = available_mb()  # before Ray's own processes start; the driver is running
        free_mb = None if free is None else free + process_memory_mb()["pss"]
        store_mb = rc.object_store_mb
        footprint: Footprint | None = None
        self.memory: MemoryPlan | None = None  # None: ray.memory_plan=false
        if rc.memory_plan and cfg.model.name in FROZEN_WEIGHT_MODELS:
            # the object store must hold the one shared copy: size it from the probe
            footprint = probe_apart(cfg, plan)
            if rc.share_frozen:
                store_mb = max(store_mb, math.ceil(footprint.frozen_mb * 1.1) + 128)
            self.started_ray = connect(rc, store_mb)
        elif rc.memory_plan:
            # nothing to share: probe while Ray starts (its start mostly waits for its
            # daemons, ~5 s on 2 cores; the probe of a small model takes ~1.5 s)
            footprint, self.started_ray = probe_beside(cfg, plan,
                                                       lambda: connect(rc, store_mb))
        else:
            self.started_ray = connect(rc, store_mb)
        nodes = spread.live_nodes()
        self.groups = groups_for(cfg, ray.cluster_resources(), nodes)
        self.host_of = {cid: i for i, cids in enumerate(self.groups) for cid in cids}
        share = shares_frozen_weights(cfg, len(self.groups))
        grouped = spread.grouped(rc, nodes)  # several nodes: checked node by node
        if footprint is not None:
            node_mb = rc.node_memory_mb or (free_mb if self.started_ray
                                            else spread.smallest_node_mb())
            driver_mb = process_memory_mb()["pss"]
            graph = plan.topology.round_graph(0)
            degrees = [graph.degree(c) for c in range(cfg.n)]

            def replan(groups: list[list[int]], available: float | None = node_mb,
                       driver: float = driver_mb, shared: bool | None = None) -> MemoryPlan:
                assert footprint is not None
                if shared is None:
                    shared = shares_frozen_weights(cfg, len(groups))
                return plan_memory(footprint, groups, shared, available, driver,
                                   cfg.model.name, on_gpu=rc.num_gpus_per_actor > 0,
                                   store_mb=store_mb if self.started_ray else math.inf,
                                   degrees=degrees)

            self.memory = replan(self.groups)
            try:
                if not grouped:
                    print(self.memory.describe(), flush=True)
                    check_fits(self.memory, cfg.n, replan)
            except ConfigError:
                self.actors = []
                self.close()
                raise
        gpu = rc.num_gpus_per_actor > 0
        wanted = direct.requested(rc)  # an RDT transport, or None: the object store
        actor_class = ClientActor if wanted is None else DirectClientActor
        resources = {"num_cpus": rc.num_cpus_per_actor, "num_gpus": rc.num_gpus_per_actor}
        # on several nodes, a bundle per actor reserved where ray.placement says
        self.actors = []
        self.group = None
        try:
            self.group = spread.place(rc, len(self.groups), nodes, None if self.memory is None
                                      else list(self.memory.actors_pss_mb))
            if self.memory is not None and self.group is not None:
                share_all = shares_frozen_weights(cfg, len(self.groups))

                def plan_node(groups: list[list[int]], node: Node) -> MemoryPlan:
                    return replan(groups, node.memory_mb, driver_mb if node.driver else 0.0,
                                  share_all)

                known = spread.cluster_nodes(rc, nodes)
                self.node_memory = check_nodes(self.groups, spread.bundle_nodes(self.group),
                                               known, plan_node, rc.placement)
                for node_id, node_plan in self.node_memory.items():
                    print(f"{known[node_id].name}: {node_plan.describe()}", flush=True)
        except ConfigError:
            self.close()
            raise
        # warm hosts from this driver's earlier runs, where Ray outlives this run (never
        # in a placement group: it goes with the run)
        self.warm_key = (warm.shape_key(rc.num_cpus_per_actor, rc.num_gpus_per_actor)
                         if rc.reuse_actors and wanted is None and not self.started_ray
                         and self.group is None else None)

        started: list[Any] = []  # what to wait on: each host's set-up

        def host(*setup: Any, **kw: Any) -> Any:
            placed = actor_class.options(**resources,
                                         **spread.scheduling(self.group, kw["index"]))
            handle, setting_up = warm.start(self.warm_key, lambda: placed.remote(*setup, **kw),
                                            *setup, **kw)
            started.append(setting_up)
            return handle

        self.actors = []
        self.direct: direct.DirectPayloads | None = None
        shared_bytes = 0
        try:
            # the plan the runner built, sent once: every actor unpickles the same one
            plan_ref = ray.put(plan)
            if share:
                # the first actor builds the model and its frozen weights go to the object
                # store once (owned by the driver, so they outlive any actor); every other
                # actor maps them read-only, dropping the copy it built before its clients
                # are made, and the first switches to them too
                self.actors.append(host(cfg, plan_ref, self.groups[0], gpu, index=0))
                frozen = self.actors[0].frozen_weights.remote()
                shared_bytes = ray.get(self.actors[0].adopt.remote(frozen))
                self.actors += [host(cfg, plan_ref, cids, gpu, frozen, index=k)
                                for k, cids in enumerate(self.groups[1:], 1)]
                self.frozen = frozen
            else:
                self.actors = [host(cfg, plan_ref, cids, gpu, index=k)
                               for k, cids in enumerate(self.groups)]
            ray.get(started)  # surface build errors now
            if wanted is not None:
                try:
                    self.direct = direct.DirectPayloads(wanted, self.actors)
                except Exception as exc:  # no such backend here: the object store it is
                    if died(exc):  # ...unless an actor died: that is a loss
                        raise
                    reason = (str(exc).splitlines() or [""])[0]
                    print(f"payloads: Ray Direct Transport over {wanted} is unavailable "
                          f"({type(exc).__name__}: {reason}); using the object store",
                          flush=True)
            self.compute_charge: dict[str, Any] = ray.get(
                self.actors[0].compute_charge.remote())
        except Exception as exc:
            self.close()
            if died(exc):
                reason = (str(exc).splitlines() or [""])[0]
                raise ActorLost(f"an actor died while the run's actors started ({reason})"
                                ) from exc
            raise
        try:
            where = ray.get([a.node_id.remote() for a in self.actors])
        except ray.exceptions.RayActorError as exc:
            self.close()
            raise ActorLost(f"an actor died while the run's actors started ({exc})") from None
        sizes = sorted(len(g) for g in self.groups)
        # what the run summary records of how the run was laid out on Ray
        self.layout: dict[str, Any] = {
            "ray_actors": len(self.groups),
            "ray_clients_per_actor": (str(sizes[0]) if sizes[0] == sizes[-1]
                                      else f"{sizes[0]}-{sizes[-1]}"),
            "ray_payload_path": "object store" if self.direct is None else self.direct.path,
            "ray_shared_frozen_mb": round(shared_bytes / 2**20, 1),
            # how many nodes host actors, and each actor's node and clients
            "ray_nodes": len(set(where)),
            "ray_actor_nodes": {str(k): {"node": node, "clients": cids}
                                for k, (node, cids) in enumerate(zip(where, self.groups,
                                                                     strict=True))},
        }

    @property
    def survives_loss(self) -> bool:
        # over RDT the run cannot go on without a lost actor: payloads it kept for others
        # died with it, and its receivers' calls fail with it, so back to the checkpoint
        return self.direct is None

    def live(self) -> list[int]:
        return [i for i in range(len(self.actors)) if i not in self.dead]

    def actor_of(self, cid: int) -> int:
        return self.host_of[cid]

    def run_phase(self, round_: int, step: int, phase: str, inboxes: dict[int, Inboxes],
                  members: RoundMembers | None) -> dict[int, PhaseResult]:
        """One ``run_phase`` call per actor, with its inbox bundle (references to large
        payloads: the actor fetches those itself); over RDT, every hand-over it needs is
        submitted first. Actors that died: :class:`HostsLost`, with the others' results.

        A payload in the object store lives with the actor that sent it: one whose actor
        is gone is lost with it, and never handed on. An actor that failed reading one
        (its sender died during this phase) is called again without it."""
        if self.direct is None:
            inboxes = {i: self.readable(inbox) for i, inbox in inboxes.items()}

            def call(i: int, inbox: Inboxes) -> Any:
                return self.actors[i].run_phase.remote(round_, step, phase, inbox, members)
        else:
            handed = {i: self.direct.hand_overs(self.actors, i, inbox)
                      for i, inbox in inboxes.items()}

            def call(i: int, inbox: Inboxes) -> Any:
                return self.actors[i].run_phase_direct.remote(
                    round_, step, phase, inbox, members, self.direct.release(i), *handed[i])
        # over RDT, a receiver whose hand-over came from an actor that died fails with
        # it, and is reported lost with it: the run goes back to its checkpoint anyway
        got, lost, unread = self._gather({i: call(i, inbox) for i, inbox in inboxes.items()},
                                         first_loss_ends=self.direct is not None)
        while unread:
            self.find_senders_lost(unread, inboxes, lost)
            inboxes |= {i: self.readable(inboxes[i]) for i in unread}
            again, more, unread = self._gather({i: call(i, inboxes[i]) for i in unread})
            got |= again
            lost = sorted(lost + more)
        results: dict[int, PhaseResult] = {}
        for i, (outgoing, compute, stats) in sorted(got.items()):
            if self.direct is not None:
                self.direct.posted(i, outgoing)
            results[i] = PhaseResult(outgoing, compute, stats)
        if lost:
            raise HostsLost(lost, results)
        return results

    def sent_by_lost(self, message: Message) -> bool:
        """Whether ``message``'s payload sits in the object store of an actor now gone."""
        return isinstance(message.payload, ray.ObjectRef) and \
            self.actor_of(message.src) in self.dead

    def readable(self, inbox: Inboxes) -> Inboxes:
        """``inbox`` without the messages whose payloads were lost with their sender's
        actor (counted in ``messages_lost``)."""
        out = {cid: [m for m in msgs if not self.sent_by_lost(m)] for cid, msgs in inbox.items()}
        self.messages_lost += sum(map(len, inbox.values())) - sum(map(len, out.values()))
        return out

    def find_senders_lost(self, unread: list[int], inboxes: dict[int, Inboxes],
                          lost: list[int]) -> None:
        """After ``unread`` failed reading lost payloads: the actors that sent them, asked
        whether they live; the dead are added to ``lost`` (and ``self.dead``). None dead —
        a payload lost with no actor gone — or over RDT: back to the checkpoint."""
        senders = {self.actor_of(m.src) for i in unread for msgs in inboxes[i].values()
                   for m in msgs if isinstance(m.payload, ray.ObjectRef)}
        _, gone, _ = self._gather({a: self.actors[a].node_id.remote()
                                   for a in sorted(senders - self.dead)})
        lost.extend(gone)
        if not senders & self.dead or self.direct is not None:
            raise ActorLost(f"payloads sent to the actor(s) hosting clients "
                            f"{[self.groups[i] for i in unread]} were lost")

    def _gather(self, calls: dict[int, Any], first_loss_ends: bool = False
                ) -> tuple[dict[int, Any], list[int], list[int]]:
        """Each host's result (``calls``: host → its call), the hosts whose actor died,
        marked dead: never called again, and those that failed reading a lost payload."""
        got, lost, unread = gather(calls, first_loss_ends)
        self.dead.update(lost)
        return got, lost, unread

    def _all(self, calls: dict[int, Any]) -> dict[int, Any]:
        """Each host's result, in the order of ``calls``; :class:`HostsLost` if any died
        (after every call has come back)."""
        got, lost, unread = self._gather(calls)
        if unread:  # a call that reads no payloads: never, unless Ray lost an object
            raise ActorLost(f"the actor(s) hosting clients {[self.groups[i] for i in unread]} "
                            "lost an object they read")
        if lost:
            raise HostsLost(lost)
        return got

    def settle(self, in_flight: Iterable[Message]) -> None:
        if self.direct is not None:
            self.direct.settle(in_flight)

    def vectors(self, cids: list[int]) -> dict[int, np.ndarray]:
        out: dict[int, np.ndarray] = {}
        for part in self._all({i: self.actors[i].vectors.remote([c for c in cids
                                                                 if c in self.groups[i]])
                               for i in sorted({self.actor_of(c) for c in cids})}).values():
            out.update(part)
        return out

    def bootstrap(self, cid: int, vector: np.ndarray | None) -> None:
        host = self.actor_of(cid)
        self._all({host: self.actors[host].bootstrap.remote(cid, vector)})

    def param_sums(self, parts: dict[int, list[int]]) -> list[np.ndarray | None]:
        return list(self._all({i: self.actors[i].param_sum.remote(cids)
                               for i, cids in parts.items()}).values())

    def evaluate(self, mean: np.ndarray, per_client: bool, parts: dict[int, list[int]]
                 ) -> list[dict[str, Any]]:
        mean_ref = ray.put(mean)
        return list(self._all({i: self.actors[i].evaluate.remote(mean_ref, k == 0,
                                                                 per_client, cids)
                               for k, (i, cids) in enumerate(parts.items())}).values())

    def save(self, hosts: list[int]) -> tuple[dict[int, Any], dict[str, Any]]:
        clients: dict[int, Any] = {}
        process: dict[str, Any] = {}
        for part, proc in self._all({i: self.actors[i].save.remote(k == 0)
                                     for k, i in enumerate(hosts)}).values():
            clients.update(part)
            process = process if proc is None else proc
        return clients, process

    def load(self, clients: dict[int, Any], process: dict[str, Any]) -> None:
        self._all({i: self.actors[i].load.remote(
                       {cid: clients[cid] for cid in self.groups[i] if cid in clients}, process)
                   for i in self.live()})

    def client_vectors(self, hosts: list[int]) -> dict[int, np.ndarray]:
        out: dict[int, np.ndarray] = {}
        for part in self._all({i: self.actors[i].client_vectors.remote()
                               for i in hosts}).values():
            out.update(part)
        return out

    def storable(self, *queues: dict[Any, list[Message]]) -> list[dict[Any, list[Message]]]:
        """Payloads fetched (those kept by their senders' actors over RDT, and those in
        the object store) and decoded to CPU tensors."""
        if self.direct is not None:
            try:
                queues = tuple(self.direct.fetch(self.actors, *queues))
            except HostsLost as lost:
                self.dead.update(lost.hosts)
                raise
        cpu = torch.device("cpu")
        # what a lost actor's clients sent and nobody read is lost with it
        return [transport.receive({k: [m for m in msgs if not self.sent_by_lost(m)]
                                   for k, msgs in queue.items()}, cpu) for queue in queues]

    def routable(self, *queues: dict[Any, list[Message]]) -> list[dict[Any, list[Message]]]:
        return [{k: transport.send(msgs) for k, msgs in queue.items()} for queue in queues]

    def close(self) -> None:
        if getattr(self, "direct", None) is not None:
            self.direct.close()
            self.direct = None
        alive = [a for i, a in enumerate(self.actors) if i not in self.dead]
        for i in self.dead:
            ray.kill(self.actors[i])
        warm.keep(getattr(self, "warm_key", None), alive)
        self.actors = []
        spread.release(getattr(self, "group", None))
        self.group = None
        if self.started_ray:
            shutdown()
            self.started_ray = False
