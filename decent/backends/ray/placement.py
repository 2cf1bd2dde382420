"""Which clients each Ray actor hosts: fixed-size groups, or as many balanced groups as
the cluster has actor slots. Plain arithmetic on resource counts, so the memory planner
and sweeps use it without Ray."""

from __future__ import annotations

import math

from decent.engine.config import RayConfig, RunConfig


def placement(n: int, clients_per_actor: int) -> list[list[int]]:
    """Contiguous groups of ``clients_per_actor`` clients (the last may be smaller)."""
    actors = math.ceil(n / clients_per_actor)
    return [list(range(a * clients_per_actor, min(n, (a + 1) * clients_per_actor)))
            for a in range(actors)]


def balanced(n: int, actors: int) -> list[list[int]]:
    """``n`` clients in ``actors`` contiguous groups whose sizes differ by at most one."""
    actors = max(1, min(n, actors))
    base, extra = divmod(n, actors)
    groups, start = [], 0
    for a in range(actors):
        size = base + (a < extra)
        groups.append(list(range(start, start + size)))
        start += size
    return groups


def actor_slots(rc: RayConfig, resources: dict[str, float]) -> int:
    """How many actors the cluster runs at once: its GPUs over ``num_gpus_per_actor`` when
    actors take GPUs, else its CPUs over ``num_cpus_per_actor`` (or one per CPU when actors
    reserve none: more torch processes than cores only compete for them)."""
    if rc.num_gpus_per_actor > 0:
        slots = resources.get("GPU", 0.0) / rc.num_gpus_per_actor
    else:
        slots = resources.get("CPU", 1.0) / (rc.num_cpus_per_actor or 1.0)
    return max(1, int(slots + 1e-9))


def node_slots(rc: RayConfig, nodes: list[dict[str, float]]) -> int:
    """The actor slots of a cluster counted node by node (nodes are not assumed equal: a
    slot is whole on one node): Σ ⌊GPUs ÷ num_gpus_per_actor⌋ when actors take GPUs, else
    Σ ⌊CPUs ÷ num_cpus_per_actor⌋ (one CPU per actor when they reserve none)."""
    if rc.num_gpus_per_actor > 0:
        slots = sum(int(n.get("GPU", 0.0) / rc.num_gpus_per_actor + 1e-9) for n in nodes)
    else:
        per = rc.num_cpus_per_actor or 1.0
        slots = sum(int(n.get("CPU", 0.0) / per + 1e-9) for n in nodes)
    return max(1, slots)


def groups_for(cfg: RunConfig, resources: dict[str, float],
               nodes: list[dict[str, float]] | None = None) -> list[list[int]]:
    """The clients of each actor, the one rule for ``ray.clients_per_actor``: a number k
    gives contiguous groups of k; ``auto`` splits the clients evenly over
    ``ray.actor_slots`` actors (a sweep's share of the cluster for one trial) or, unset,
    over the actor slots the cluster has — counted per node when ``nodes`` (each live
    node's resources) are given, else from the totals ``resources`` — never more than
    clients."""
    rc = cfg.ray
    if rc.clients_per_actor != "auto":
        return placement(cfg.n, int(rc.clients_per_actor))
    slots = node_slots(rc, nodes) if nodes else actor_slots(rc, resources)
    return balanced(cfg.n, rc.actor_slots or slots)
