"""The memory plan of a cluster, node by node: each node holds Ray's daemons, the actors
its bundles were reserved on (with their clients), one copy of the shared frozen weights
if any, and — on the driver's node only — the driver. Nodes need not be equal: each is
checked against its own memory (Ray's ``memory`` resource of that node: what was free
when its raylet started, less its object store; or ``ray.node_memory_mb`` for every node).

A node that cannot hold its actors is refused in one line naming it, with a layout that
fits if one does: a ``clients_per_actor`` whose actors, laid out over the nodes' slots and
memory, fit every node. The layout is found as ``spread`` makes it once each bundle
reserves its actor's memory: largest actors first, each on the node hosting the fewest so
far among those with a slot and the memory for it (the most memory left breaks ties)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from decent.backends.ray.memory_plan import MemoryPlan
from decent.backends.ray.placement import placement
from decent.core.errors import ConfigError

# the plan of one node's actors: their groups of clients, and whether the driver is there
PlanNode = Callable[[list[list[int]], "Node"], MemoryPlan]


@dataclass(frozen=True)
class Node:
    id: str
    address: str  # its IP, as Ray names it
    memory_mb: float | None  # None: unknown (not checked)
    slots: int  # actors it can host at once
    driver: bool = False  # the driver runs here

    @property
    def name(self) -> str:
        return f"node {self.address} ({self.id[:8]})"


def node_plans(groups: list[list[int]], actor_nodes: list[str], nodes: dict[str, Node],
               plan_node: PlanNode) -> dict[str, MemoryPlan]:
    """Each node's plan, for the actors placed on it (``actor_nodes``: actor → node id)."""
    on: dict[str, list[list[int]]] = {}
    for group, node in zip(groups, actor_nodes, strict=True):
        on.setdefault(node, []).append(group)
    return {node: plan_node(held, nodes[node]) for node, held in on.items()}


def overfull(plans: dict[str, MemoryPlan]) -> list[str]:
    """The nodes whose peak is above their memory, the most overfull first."""
    over = [n for n, p in plans.items()
            if p.available_mb is not None and p.node_peak_mb > p.available_mb]
    return sorted(over, key=lambda n: plans[n].available_mb - plans[n].node_peak_mb)


def lay_out(groups: list[list[int]], nodes: list[Node], plan_node: PlanNode
            ) -> dict[str, list[list[int]]] | None:
    """The groups laid out over the nodes so that each fits, or None: largest first, each
    on the node hosting the fewest among those with a free slot and the memory for it
    (then the one with the most memory left, then the first)."""
    held: dict[str, list[list[int]]] = {n.id: [] for n in nodes}
    for group in sorted(groups, key=len, reverse=True):
        room = []
        for order, node in enumerate(nodes):
            if len(held[node.id]) >= node.slots:
                continue
            plan = plan_node(held[node.id] + [group], node)
            left = math.inf if plan.available_mb is None else \
                plan.available_mb - plan.node_peak_mb
            if left >= 0:
                room.append((-len(held[node.id]), left, -order, node.id))
        if not room:
            return None
        held[max(room)[3]].append(group)
    return {n: g for n, g in held.items() if g}


def fitting_layout(n: int, nodes: list[Node], plan_node: PlanNode, most_actors: int,
                   skip: list[list[int]] | None = None
                   ) -> tuple[int, dict[str, list[list[int]]]] | None:
    """The ``clients_per_actor`` (whose groups are not ``skip``) with the most actors (at
    most ``most_actors``, and the nodes' slots) whose layout fits every node, and that
    layout; None if none does."""
    slots = sum(node.slots for node in nodes)
    for actors in range(min(most_actors, slots, n), 0, -1):
        k = math.ceil(n / actors)
        groups = placement(n, k)
        if groups == skip:
            continue
        layout = lay_out(groups, nodes, plan_node)
        if layout is not None:
            return k, layout
    return None


def check_nodes(groups: list[list[int]], actor_nodes: list[str], nodes: dict[str, Node],
                plan_node: PlanNode, placement_name: str) -> dict[str, MemoryPlan]:
    """Each node's plan; one line naming the most overfull node and a layout that fits
    if any node's peak is above its memory."""
    plans = node_plans(groups, actor_nodes, nodes, plan_node)
    over = overfull(plans)
    if not over:
        return plans
    node, plan = nodes[over[0]], plans[over[0]]
    hosting = [x for x in nodes.values() if x.slots > 0]
    n = sum(map(len, groups))
    # under spread, Ray has laid the present groups out already: others are needed
    found = fitting_layout(n, hosting, plan_node, max(len(groups), len(hosting)),
                           skip=groups if placement_name == "spread" else None)
    if found is None:
        hint = ("no layout over these nodes fits: use fewer clients (topology.n), a smaller "
                "model, GPUs (ray.num_gpus_per_actor) or bigger nodes")
    else:
        k, layout = found
        where = ", ".join(f"{len(g)} on {nodes[x].name}" for x, g in layout.items())
        hint = (f"set ray.placement=spread ({where})" if placement(n, k) == groups
                else f"set ray.clients_per_actor={k} ({sum(map(len, layout.values()))} "
                f"actor(s): {where})")
    actors = sum(1 for x in actor_nodes if x == node.id)
    raise ConfigError("ray.clients_per_actor",
                      f"{node.name} would need ~{plan.node_peak_mb:.0f} MB for its {actors} "
                      f"actor(s) but has {plan.available_mb:.0f} MB ({plan.describe()}); "
                      f"{hint}")
