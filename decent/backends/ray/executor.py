"""``backend: ray`` — the engine's executor whose hosts are ClientActors, each hosting a
group of clients; the engine, on the driver, routes.

Routing is bookkeeping on message headers: an edge check, a byte count and a sort. Payloads
of 64 KiB or more travel as object references put by their sender (:mod:`.transport`), so
the driver files references, never tensor data, and needs no router actor of its own (a
separate Coordinator process would import torch, ~300 MB, and add one call per actor and
one per phase). Each phase costs one call per actor: it takes the actor's inbox bundle and
returns its outbox, its compute times and its statistics."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import numpy as np
import ray
import torch

from decent.backends.ray import direct, spread, transport, warm
from decent.backends.ray.config import LossPolicy
from decent.backends.ray.layout import (
    FROZEN_WEIGHT_MODELS,
    Layout,
    plan_layout,
)
from decent.backends.ray.losses import died, gather
from decent.backends.ray.memory_plan import (
    Footprint,
    available_mb,
    probe_apart,
    probe_beside,
    process_memory_mb,
)
from decent.backends.ray.session import connect, shutdown
from decent.core.errors import ActorLost, HostsLost
from decent.core.messages import Message
from decent.engine.config import RunConfig
from decent.engine.executor import Inboxes, PhaseResult
from decent.engine.plan import RunPlan
from decent.network.membership import RoundMembers


def node_gone(exc: BaseException) -> bool:
    """Whether ``exc`` says an actor's planned node is gone (it died after the plan was
    made): a loss like an actor's death while starting, planned again over the nodes
    that answer then."""
    return isinstance(exc, ray.exceptions.ActorUnschedulableError)


class RayActors:
    """The executor whose hosts are ClientActors, one per group of clients. It plans the
    run's :class:`~decent.backends.ray.layout.Layout` from the cluster as it is now (memory
    probed first, then Ray started, then the plan: nothing starts before it), starts
    exactly that, moves payloads between the actors (object store or RDT) and reports an
    actor that died, in whichever call, as a lost host (:class:`HostsLost`). One that dies
    while the actors start is :class:`ActorLost`: there is no run to go on without it yet,
    so the runner builds the engine again (back to the checkpoint, or the start), planning
    again over the nodes alive then."""

    def __init__(self, cfg: RunConfig, plan: RunPlan) -> None:
        self.cfg = cfg
        transport.send_by_value(cfg.imports)  # before anything pickles the plan
        self.dead: set[int] = set()  # actors that died: never called again
        # messages whose payloads were lost with their sender's actor, never delivered
        self.messages_lost = 0
        self.actors: list[Any] = []
        self.direct: direct.DirectPayloads | None = None
        self.started_ray = False
        self.warm_key: Any = None
        rc = cfg.ray
        free = available_mb()  # before Ray's own processes start; the driver is running
        footprint, store_mb = self._probe_and_connect(cfg, plan, free)
        try:
            facts = spread.cluster_facts(
                rc, None if free is None or not self.started_ray
                else free + process_memory_mb()["pss"],
                store_mb if self.started_ray else math.inf)
            graph = plan.topology.round_graph(0)
            self.planned = plan_layout(cfg, facts, footprint, process_memory_mb()["pss"],
                                    [graph.degree(c) for c in range(cfg.n)])
        except BaseException:
            self.close()
            raise
        for line in self.planned.lines():
            print(line, flush=True)
        self.start(self.planned, plan)

    def _probe_and_connect(self, cfg: RunConfig, plan: RunPlan, free: float | None
                           ) -> tuple[Footprint | None, int]:
        """The memory probe's footprint (None: ``ray.memory_plan=false``) and the object
        store's size, with Ray connected (or started)."""
        rc = cfg.ray
        store_mb = rc.object_store_mb
        footprint: Footprint | None = None
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
        return footprint, store_mb

    def start(self, layout: Layout, plan: RunPlan) -> None:
        """Start the actors ``layout`` names, where it names them; share the frozen
        weights and open the payload transport it chose."""
        from decent.backends.ray.client_actor import ClientActor, DirectClientActor

        cfg, rc = self.cfg, self.cfg.ray
        self.groups = layout.groups
        self.host_of = layout.host_of()
        gpu = rc.num_gpus_per_actor > 0
        wanted = layout.transport
        actor_class = ClientActor if wanted is None else DirectClientActor
        resources = {"num_cpus": rc.num_cpus_per_actor, "num_gpus": rc.num_gpus_per_actor}
        several = any(n is not None for n in layout.nodes) and len(set(layout.nodes)) > 1
        # warm hosts from this driver's earlier runs, where Ray outlives this run (never
        # pinned to nodes of a plan: a warm host is wherever it was)
        self.warm_key = (warm.shape_key(rc.num_cpus_per_actor, rc.num_gpus_per_actor)
                         if rc.reuse_actors and wanted is None and not self.started_ray
                         and not several else None)
        # kept hosts of another shape hold CPUs or GPU shares these actors may need
        warm.make_room(self.warm_key)
        started: list[Any] = []  # what to wait on: each host's set-up

        def host(*setup: Any, **kw: Any) -> Any:
            placed = actor_class.options(**resources, **(
                {} if self.warm_key is not None else spread.scheduling(layout, kw["index"])))
            handle, setting_up = warm.start(self.warm_key, lambda: placed.remote(*setup, **kw),
                                            *setup, **kw)
            started.append(setting_up)
            return handle

        shared_bytes = 0
        try:
            # the plan the runner built, sent once: every actor unpickles the same one
            plan_ref = ray.put(plan)
            if layout.share_frozen:
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
            where = ray.get([a.placement.remote() for a in self.actors])
            wanted = self.confirm_transport(wanted, where)
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
        except BaseException as exc:  # Ctrl-C while the actors start closes them too
            self.close()
            if died(exc) or node_gone(exc):
                reason = (str(exc).splitlines() or [""])[0]
                raise ActorLost(f"an actor died while the run's actors started ({reason})"
                                ) from exc
            raise
        sizes = sorted(len(g) for g in self.groups)
        nodes = [node for node, _ in where]
        # what the run summary records of how the run was laid out on Ray
        self.layout: dict[str, Any] = {
            "ray_actors": len(self.groups),
            "ray_clients_per_actor": (str(sizes[0]) if sizes[0] == sizes[-1]
                                      else f"{sizes[0]}-{sizes[-1]}"),
            "ray_payload_path": "object store" if self.direct is None else self.direct.path,
            "ray_shared_frozen_mb": round(shared_bytes / 2**20, 1),
            # how many nodes host actors, and each actor's node, GPUs and clients
            "ray_nodes": len(set(nodes)),
            "ray_actor_nodes": {str(k): {"node": node, "clients": cids}
                                | ({"gpus": ids} if ids else {})
                                for k, ((node, ids), cids) in enumerate(zip(
                                    where, self.groups, strict=True))},
        }

    @staticmethod
    def confirm_transport(wanted: str | None, where: list[tuple[str, list[int]]]
                          ) -> str | None:
        """The planned transport, unless the GPU ids Ray assigned put two actors on one
        device after all: NCCL cannot hold two ranks of one GPU, so the object store."""
        if wanted != "nccl":
            return wanted
        devices = [(node, gpu) for node, ids in where for gpu in ids]
        if len(devices) != len(set(devices)):
            print("payloads: the object store, not RDT over NCCL: Ray assigned one GPU to "
                  "several actors, and NCCL cannot hold two ranks of one device", flush=True)
            return None
        return wanted

    @property
    def loss_policy(self) -> LossPolicy:
        # over RDT the run cannot go on without a lost actor: payloads it kept for others
        # died with it, and its receivers' calls fail with it, so back to the checkpoint
        policy = self.cfg.ray.loss_policy()
        return policy if self.direct is None else replace(policy, on_loss="restart")

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
            self.direct.settled(ref for refs in handed.values() for ref in refs)

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
        """Stop what was started, however far the start got (a half-started executor, or
        one closed twice, closes without raising)."""
        if getattr(self, "direct", None) is not None:
            with contextlib.suppress(Exception):
                self.direct.close()
            self.direct = None
        actors = list(getattr(self, "actors", []))
        dead = getattr(self, "dead", set())
        for i in sorted(dead):
            if i < len(actors):
                with contextlib.suppress(Exception):
                    ray.kill(actors[i])
        with contextlib.suppress(Exception):
            warm.keep(getattr(self, "warm_key", None),
                      [a for i, a in enumerate(actors) if i not in dead])
        self.actors = []
        if getattr(self, "started_ray", False):
            shutdown()
            self.started_ray = False
