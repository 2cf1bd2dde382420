"""Where a run's actors live on a cluster of several nodes: a placement group of one
bundle per actor, laid out by ``ray.placement`` (``spread`` over the nodes, ``pack`` onto
few, ``strict_spread``: one per node).

An actor that reserves nothing (``num_cpus_per_actor: 0``, the default) could otherwise
land anywhere, and Ray packs such actors onto one node; a bundle reserves what the actor
really uses — its GPU share and CPUs, or one CPU when it reserves none, and the memory
the memory plan estimates for it — so the actors spread, and Ray puts none on a node
without the memory for it (nodes need not be equal). Where fixed-size groups ask for more
actors than the nodes have CPUs, a bundle reserves a share small enough that each node can
take its turn. A single node (an embedded Ray, a laptop) needs no placement group, and a
Tune trial runs inside its own."""

from __future__ import annotations

import math
from typing import Any

import ray
from ray.util.placement_group import (
    PlacementGroup,
    placement_group,
    placement_group_table,
    remove_placement_group,
)
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from decent.backends.ray.node_memory import Node
from decent.backends.ray.placement import node_slots
from decent.core.errors import ConfigError
from decent.engine.config import RayConfig

STRATEGIES = {"spread": "SPREAD", "pack": "PACK", "strict_spread": "STRICT_SPREAD"}
# how long the cluster may take to reserve the bundles (an autoscaler adding a node
# takes minutes; a cluster that can never hold them is refused after this)
PLACE_TIMEOUT_S = 60.0


def live_nodes() -> list[dict[str, Any]]:
    """Each live node's resources (its id under ``"node"``, its IP under ``"address"``)."""
    return [{**node["Resources"], "node": node["NodeID"],
             "address": node["NodeManagerAddress"]} for node in ray.nodes() if node["Alive"]]


def hosts_actors(rc: RayConfig, node: dict[str, Any]) -> bool:
    if rc.num_gpus_per_actor > 0:
        return node.get("GPU", 0.0) >= rc.num_gpus_per_actor
    return node.get("CPU", 0.0) > 0


def bundle(rc: RayConfig, actors: int, nodes: list[dict[str, Any]]) -> dict[str, float]:
    """What one actor's bundle reserves."""
    cpu = rc.num_cpus_per_actor or 1.0
    if rc.num_gpus_per_actor > 0:
        return {"GPU": rc.num_gpus_per_actor} | ({"CPU": rc.num_cpus_per_actor}
                                                 if rc.num_cpus_per_actor else {})
    cpus = [n["CPU"] for n in nodes if hosts_actors(rc, n)]
    if not rc.num_cpus_per_actor and cpus:
        # reserving nothing: at most the share each node has for its turn of the actors
        # (Ray counts resources in units of 1e-4)
        share = min(cpus) / math.ceil(actors / len(cpus))
        cpu = min(cpu, math.floor(share * 1e4) / 1e4)
    return {"CPU": cpu}


def grouped(rc: RayConfig, nodes: list[dict[str, Any]]) -> bool:
    """Whether the actors need a placement group: several nodes host actors (or
    ``strict_spread`` is asked for), outside a Tune trial (its actors are scheduled in the
    trial's group)."""
    if ray.get_runtime_context().get_placement_group_id() is not None:
        return False
    return rc.placement == "strict_spread" or sum(hosts_actors(rc, n) for n in nodes) > 1


def place(rc: RayConfig, actors: int, nodes: list[dict[str, Any]],
          memory_mb: list[float] | None = None) -> PlacementGroup | None:
    """The placement group of ``actors`` bundles, reserved; None where one is not needed
    (:func:`grouped`). With ``memory_mb`` (each actor's estimate), each bundle reserves
    that much of its node's ``memory`` resource too. One line naming ``ray.placement`` if
    the cluster cannot hold them."""
    if not grouped(rc, nodes):
        return None
    hosting = [n for n in nodes if hosts_actors(rc, n)]
    one = bundle(rc, actors, nodes)
    bundles = [dict(one) for _ in range(actors)]
    if memory_mb is not None:
        for b, mb in zip(bundles, memory_mb, strict=True):
            b["memory"] = float(math.ceil(mb) * 2**20)
        one = one | {"memory": max(b["memory"] for b in bundles)}
    fit = [min(int(n.get(k, 0.0) / v + 1e-9) for k, v in one.items()) for n in hosting]
    room = sum(min(f, 1) for f in fit) if rc.placement == "strict_spread" else sum(fit)
    if room < actors:  # never, on these nodes: said now rather than after a wait
        raise cannot_place(rc, actors, one, hosting, "")
    group = placement_group(bundles, strategy=STRATEGIES[rc.placement])
    if not group.wait(timeout_seconds=PLACE_TIMEOUT_S):
        remove_placement_group(group)
        raise cannot_place(rc, actors, one, hosting, f" within {PLACE_TIMEOUT_S:g} s")
    return group


def cannot_place(rc: RayConfig, actors: int, one: dict[str, float],
                 hosting: list[dict[str, Any]], when: str) -> ConfigError:
    have = ", ".join(f"{n.get('CPU', 0):g} CPU" + (f" {n['GPU']:g} GPU" if n.get("GPU")
                                                    else "")
                     + (f" {n.get('memory', 0) / 2**20:.0f} MB" if "memory" in one else "")
                     for n in hosting)
    what = {k: (f"{v / 2**20:.0f} MB" if k == "memory" else v) for k, v in one.items()}
    return ConfigError("ray.placement", f"the cluster cannot place {actors} actors of "
                       f"{what} {rc.placement} over its nodes ({have or 'none'}){when}: use "
                       "fewer or smaller actors (ray.clients_per_actor, "
                       "ray.num_cpus_per_actor), another ray.placement, or more nodes")


def scheduling(group: PlacementGroup | None, index: int) -> dict[str, Any]:
    """The ``.options`` that put actor ``index`` in its bundle (none without a group)."""
    if group is None:
        return {}
    return {"scheduling_strategy": PlacementGroupSchedulingStrategy(
        group, placement_group_bundle_index=index)}


def bundle_nodes(group: PlacementGroup) -> list[str]:
    """The node each bundle was reserved on, by bundle index."""
    table = placement_group_table(group)["bundles_to_node_id"]
    return [table[k] for k in sorted(table)]


def release(group: PlacementGroup | None) -> None:
    if group is not None:
        remove_placement_group(group)


def smallest_node_mb() -> float | None:
    """The memory resource of the cluster's smallest live node, in MB."""
    sizes = [node["Resources"].get("memory", 0) for node in ray.nodes() if node["Alive"]]
    return min(sizes) / 2**20 if sizes and min(sizes) > 0 else None


def cluster_nodes(rc: RayConfig, nodes: list[dict[str, Any]]) -> dict[str, Node]:
    """The live nodes (``spread.live_nodes``) as the per-node memory plan sees them: each
    one's memory (``ray.node_memory_mb``, else its ``memory`` resource), actor slots, and
    whether this driver runs there."""
    here = ray.get_runtime_context().get_node_id()
    return {n["node"]: Node(n["node"], n["address"],
                            rc.node_memory_mb or (n.get("memory", 0.0) / 2**20 or None),
                            node_slots(rc, [n]) if hosts_actors(rc, n) else 0,
                            driver=n["node"] == here)
            for n in nodes}
