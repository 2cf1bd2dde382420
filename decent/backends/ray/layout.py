"""A Ray run's layout, planned before any actor starts: cluster facts in, decisions out.

:func:`plan_layout` is pure (no Ray): from the nodes alive now and the run's config it
decides the clients of each actor, the node each actor starts on and its GPU there, the
memory plan of every node (refusing, in one line with a layout that fits, one that does
not), whether the actors share one copy of the frozen weights, and how payloads move
between each pair of actors. The executor then starts exactly that
(:class:`decent.backends.ray.executor.RayActors`), and the run's summary records it.

Payloads over RDT use NCCL between GPUs: NCCL cannot hold two ranks of one device (the
communicator fails with ``NCCL_ERROR_INVALID_USAGE``), so actors that share a GPU never
join an NCCL group. Ray assigns fractional GPUs by packing them (a GPU is filled before
the next is used); the plan packs the same way, and the executor checks the ids Ray
really assigned before the transport starts.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from decent.backends.ray.memory_plan import (
    Footprint,
    GpuPlan,
    MemoryPlan,
    check_fits,
    check_gpu_fits,
    plan_gpu_memory,
    plan_memory,
)
from decent.backends.ray.node_memory import Node, check_nodes, lay_out
from decent.backends.ray.placement import groups_for, node_slots
from decent.core.errors import ConfigError
from decent.engine.config import RayConfig, RunConfig
from decent.engine.stacking import mode_of

# Models whose frozen weights are worth one copy per machine: the language models (a LoRA
# base, SubCGE's W, SPES's experts). The small built-in models freeze nothing.
FROZEN_WEIGHT_MODELS = ("causal_lm", "reward_model")
OBJECT_STORE = "object store"


@dataclass(frozen=True)
class NodeFacts:
    """One node alive (and answering) when the run is planned."""

    id: str
    address: str
    cpus: float
    gpus: float = 0.0
    memory_mb: float | None = None  # Ray's memory resource, or ray.node_memory_mb
    driver: bool = False  # the driver runs here

    @property
    def name(self) -> str:
        return f"node {self.address} ({self.id[:8]})"

    def resources(self) -> dict[str, float]:
        return {"CPU": self.cpus, "GPU": self.gpus}


@dataclass(frozen=True)
class ClusterFacts:
    """What the planner knows of the cluster: its nodes alive and answering now, whether
    the run is a Tune trial (its actors go in the trial's placement group, where Ray puts
    them), the memory free for the run on a machine where the run started Ray, the object
    store's size, and one GPU's memory where known."""

    nodes: tuple[NodeFacts, ...]
    in_trial: bool = False
    host_mb: float | None = None  # embedded Ray: memory free for the run, driver included
    store_mb: float = math.inf  # the object store (a phase's payloads wait there)
    gpu_mb: float | None = None

    def resources(self) -> dict[str, float]:
        return {"CPU": sum(n.cpus for n in self.nodes), "GPU": sum(n.gpus for n in self.nodes)}


@dataclass(frozen=True)
class Layout:
    """What a Ray run starts: actor ``k`` hosts ``groups[k]`` on ``nodes[k]`` (None: where
    Ray puts it: one node, or a Tune trial's group) and GPU ``gpus[k]`` of that node."""

    groups: list[list[int]]
    nodes: list[str | None]
    gpus: list[int | None]
    share_frozen: bool
    transport: str | None  # the RDT transport (nccl, gloo); None: the object store
    # said before start: why the transport is not the one asked for, or that Ray places
    # the actors (no node can host one yet)
    note: str | None = None
    memory: MemoryPlan | None = None  # one node's plan (None: ray.memory_plan=false)
    node_memory: dict[str, MemoryPlan] = field(default_factory=dict)  # several nodes
    node_names: dict[str, str] = field(default_factory=dict)
    gpu_memory: GpuPlan | None = None  # device memory per GPU (GPU actors, GPU size known)

    @property
    def actors(self) -> int:
        return len(self.groups)

    def host_of(self) -> dict[int, int]:
        return {cid: k for k, cids in enumerate(self.groups) for cid in cids}

    def same_gpu(self, i: int, j: int) -> bool:
        return self.gpus[i] is not None and (self.nodes[i], self.gpus[i]) == \
            (self.nodes[j], self.gpus[j])

    def pair_transport(self, i: int, j: int) -> str:
        """How a payload moves from actor ``i``'s clients to actor ``j``'s."""
        if self.transport is None or i == j:
            return OBJECT_STORE if i != j else "in process"
        return f"rdt {self.transport}"

    def lines(self) -> list[str]:
        """What the run prints before its actors start."""
        sizes = sorted(len(g) for g in self.groups)
        where = len({n for n in self.nodes if n is not None}) or 1
        used = {(self.nodes[k], g) for k, g in enumerate(self.gpus) if g is not None}
        gpus = f", {len(used)} GPU(s)" if used else ""
        out = [f"layout: {self.actors} actor(s) × {sizes[0]}"
               f"{'' if sizes[0] == sizes[-1] else f'-{sizes[-1]}'} clients on {where} "
               f"node(s){gpus}; payloads: {self.path()}"
               f"{'; frozen weights shared once per node' if self.share_frozen else ''}"]
        if self.note:
            out.append(self.note)
        if self.memory is not None:
            out.append(self.memory.describe())
        out += [f"{self.node_names.get(n, n)}: {p.describe()}"
                for n, p in self.node_memory.items()]
        if self.gpu_memory is not None:
            out.append(self.gpu_memory.describe())
        return out

    def path(self) -> str:
        return OBJECT_STORE if self.transport is None else f"rdt {self.transport}"


def shares_frozen_weights(cfg: RunConfig, actors: int) -> bool:
    """Whether the actors of this run map one copy of the frozen weights: CPU actors, more
    than one, a language model, ``ray.share_frozen`` on."""
    return (cfg.ray.share_frozen and actors > 1 and cfg.ray.num_gpus_per_actor == 0
            and cfg.device != "cuda" and cfg.model.name in FROZEN_WEIGHT_MODELS)


def requested_transport(rc: RayConfig) -> str | None:
    """The RDT transport ``ray.payload_transport`` asks for (None: the object store).
    ``auto`` picks NCCL for GPU actors and the object store for CPU actors: on one node
    the store moves CPU arrays zero-copy, faster than Gloo (benchmarks/payload_transport.py)."""
    on_gpu = rc.num_gpus_per_actor > 0
    if rc.payload_transport == "object_store" or (rc.payload_transport == "auto"
                                                  and not on_gpu):
        return None
    return "nccl" if on_gpu else "gloo"


def hosts_actors(rc: RayConfig, node: NodeFacts) -> bool:
    if rc.num_gpus_per_actor > 0:
        return node.gpus >= rc.num_gpus_per_actor
    return node.cpus > 0


def slots_of(rc: RayConfig, node: NodeFacts) -> int:
    return node_slots(rc, [node.resources()]) if hosts_actors(rc, node) else 0


def pack_gpus(rc: RayConfig, nodes: list[str | None]) -> list[int | None]:
    """Each actor's GPU on its node as Ray packs fractional requests: ⌊1/share⌋ actors per
    GPU, filled in order; an actor taking whole GPUs gets the next ones."""
    share = rc.num_gpus_per_actor
    if share <= 0:
        return [None] * len(nodes)
    per_gpu = max(1, int(1 / share + 1e-9)) if share < 1 else 1
    width = 1 if share < 1 else math.ceil(share)
    seen: dict[str | None, int] = {}
    out: list[int | None] = []
    for node in nodes:
        k = seen.get(node, 0)
        seen[node] = k + 1
        out.append(k // per_gpu * width)
    return out


TRANSPORT_NAMES = {"nccl": "NCCL", "gloo": "Gloo"}


def choose_transport(rc: RayConfig, nodes: list[str | None], gpus: list[int | None]
                     ) -> tuple[str | None, str | None]:
    """The RDT transport and, where it is not the one asked for, the line saying why."""
    wanted = requested_transport(rc)
    if wanted is not None and len(nodes) < 2:
        # one actor holds every client: no payload moves between actors, so a collective
        # group of one rank would be all cost (and its actor could never be a kept one)
        return None, (f"payloads: the object store, not RDT over {TRANSPORT_NAMES[wanted]}: "
                      "one actor holds every client, so no payload moves between actors")
    if wanted != "nccl":
        return wanted, None
    count = Counter(zip(nodes, gpus, strict=True))
    crowded = [k for k in count.values() if k > 1]
    if crowded:
        return None, (f"payloads: the object store, not RDT over NCCL: {sum(crowded)} actors "
                      f"share {len(crowded)} GPU(s) (ray.num_gpus_per_actor="
                      f"{rc.num_gpus_per_actor:g}), and NCCL cannot hold two ranks of one "
                      "device")
    return wanted, None


def assign_nodes(rc: RayConfig, groups: list[list[int]], nodes: list[NodeFacts]) -> list[str]:
    """Each actor's node by ``ray.placement`` with no memory to weigh: ``spread`` the next
    actor on the node hosting the fewest among those with a free slot, ``pack`` the first
    node with one, ``strict_spread`` one actor per node. Beyond every slot (actors that
    reserve little) the node hosting the fewest."""
    if rc.placement == "strict_spread" and len(groups) > len(nodes):
        raise cannot_place(rc, len(groups), nodes, {})
    held = {n.id: 0 for n in nodes}
    slots = {n.id: slots_of(rc, n) for n in nodes}
    out = []
    for _ in groups:
        free = [n.id for n in nodes if held[n.id] < slots[n.id]]
        if rc.placement == "strict_spread":
            free = [n.id for n in nodes if held[n.id] == 0]
        pool = free or [n.id for n in nodes]
        pick = pool[0] if rc.placement == "pack" and free else \
            min(pool, key=lambda x: held[x])
        held[pick] += 1
        out.append(pick)
    return out


def cannot_place(rc: RayConfig, actors: int, nodes: list[NodeFacts],
                 memory: dict[str, float]) -> ConfigError:
    """One line: the actors cannot be laid out over these nodes under ``ray.placement``."""
    one: dict[str, Any] = {"CPU": rc.num_cpus_per_actor or 1.0} if not rc.num_gpus_per_actor \
        else {"GPU": rc.num_gpus_per_actor}
    if memory:
        one["memory"] = f"{max(memory.values()):.0f} MB"
    have = ", ".join(f"{n.cpus:g} CPU" + (f" {n.gpus:g} GPU" if n.gpus else "")
                     + (f" {n.memory_mb:.0f} MB" if memory and n.memory_mb else "")
                     for n in nodes)
    return ConfigError("ray.placement", f"the cluster cannot place {actors} actors of {one} "
                       f"{rc.placement} over its nodes ({have or 'none'}): use fewer or "
                       "smaller actors (ray.clients_per_actor, ray.num_cpus_per_actor), "
                       "another ray.placement, or more nodes")


def plan_layout(cfg: RunConfig, cluster: ClusterFacts, footprint: Footprint | None = None,
                driver_mb: float = 0.0, degrees: list[int] | None = None) -> Layout:
    """The layout of ``cfg``'s actors over ``cluster`` (its nodes alive now), with the
    memory plan when ``footprint`` is given. Pure: nothing starts, nothing is asked of Ray."""
    rc = cfg.ray
    hosting = [n for n in cluster.nodes if hosts_actors(rc, n)]
    # no node can host an actor yet (a head without CPUs whose autoscaler adds workers on
    # demand): Ray places the actors as nodes join, planned against the first node's memory
    waiting = not hosting
    groups = groups_for(cfg, cluster.resources(), [n.resources() for n in hosting])
    share = shares_frozen_weights(cfg, len(groups))
    # several nodes: each actor's node decided here (a Tune trial's actors go in its group)
    several = not (cluster.in_trial or waiting) and (len(hosting) > 1
                                                     or rc.placement == "strict_spread")
    hosting = hosting or list(cluster.nodes[:1])
    on_gpu = rc.num_gpus_per_actor > 0

    def plan(held: list[list[int]], available: float | None, driver: float,
             shared: bool | None = None) -> MemoryPlan:
        assert footprint is not None
        return plan_memory(footprint, held, shares_frozen_weights(cfg, len(held))
                           if shared is None else shared, available, driver, cfg.model.name,
                           on_gpu=on_gpu, store_mb=cluster.store_mb, degrees=degrees)

    memory, per_node = None, {}
    if not several:
        node = hosting[0]
        nodes: list[str | None] = [None if cluster.in_trial or waiting else node.id] * \
            len(groups)
        if footprint is not None:
            available = rc.node_memory_mb or cluster.host_mb or node.memory_mb
            memory = plan(groups, available, driver_mb)
            check_fits(memory, cfg.n, lambda g: plan(g, available, driver_mb))
    else:
        facts = {n.id: Node(n.id, n.address, rc.node_memory_mb or n.memory_mb,
                            slots_of(rc, n), n.driver) for n in hosting}

        def plan_node(held: list[list[int]], node: Node) -> MemoryPlan:
            return plan(held, node.memory_mb, driver_mb if node.driver else 0.0, share)

        placed: list[str] | None = None
        if footprint is not None and rc.placement == "spread":
            fitting = lay_out(groups, list(facts.values()), plan_node)
            if fitting is not None:  # the groups in their order, each on its node
                where = {id(g): x for x, held in fitting.items() for g in held}
                placed = [where[id(g)] for g in groups]
        if placed is None:
            memory_of = {} if footprint is None else {
                str(k): plan_node([g], facts[hosting[0].id]).actor_pss_mb
                for k, g in enumerate(groups)}
            if rc.placement == "strict_spread" and len(groups) > len(hosting):
                raise cannot_place(rc, len(groups), hosting, memory_of)
            placed = assign_nodes(rc, groups, hosting)
        if footprint is not None:
            per_node = check_nodes(groups, placed, facts, plan_node, rc.placement)
        nodes = list(placed)
    gpus = pack_gpus(rc, nodes)
    gpu_memory = None
    if footprint is not None and on_gpu and cluster.gpu_mb:
        # each GPU holds its actors' models, clients and one chunk's activations
        on: dict[tuple[str | None, int | None], list[list[int]]] = {}
        for k, place in enumerate(zip(nodes, gpus, strict=True)):
            on.setdefault(place, []).append(groups[k])
        # batched: the configured chunk; auto narrows its chunk to the GPU's free memory,
        # so only its narrowest (1) must fit; sequential: one client at a time
        chunk = min(cfg.execution.chunk, cfg.n) if mode_of(cfg) == "batched" else 1
        gpu_memory = plan_gpu_memory(footprint, list(on.values()), cluster.gpu_mb, chunk)
        check_gpu_fits(gpu_memory)
    transport, note = choose_transport(rc, nodes, gpus)
    if waiting:
        note = "; ".join(filter(None, [note, "layout: no live node has room for an actor "
                                       "yet; Ray places them as nodes join (an autoscaler "
                                       "adds them on demand)"]))
    return Layout(groups, nodes, gpus, share, transport, note, memory, per_node,
                  {n.id: n.name for n in cluster.nodes}, gpu_memory)


def as_one_node(resources: dict[str, float]) -> ClusterFacts:
    """Cluster totals seen as one node (a sweep sizes trials from Ray's totals)."""
    return ClusterFacts((NodeFacts("cluster", "cluster", resources.get("CPU", 0.0),
                                   resources.get("GPU", 0.0)),), in_trial=True)


def trial_layout(cfg: RunConfig, cluster: ClusterFacts, concurrent: int
                 ) -> tuple[RunConfig, Layout]:
    """A sweep trial's config and layout when ``concurrent`` trials share ``cluster``:
    under ``clients_per_actor: auto`` (and no ``actor_slots``) each trial gets its share of
    the cluster's actor slots, so the trials that run at once fit side by side. A copy:
    a validated config is never rewritten."""
    rc = cfg.ray
    if rc.clients_per_actor == "auto" and rc.actor_slots is None:
        slots = sum(slots_of(rc, n) for n in cluster.nodes)
        cfg = dataclasses.replace(cfg, ray=dataclasses.replace(
            rc, actor_slots=max(1, slots // max(1, concurrent))))
    return cfg, plan_layout(cfg, dataclasses.replace(cluster, in_trial=True))
