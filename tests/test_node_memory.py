"""The memory plan node by node (decent/backends/ray/node_memory.py): each node is checked
against its own memory with the actors placed on it, the driver counted on its node only,
and an overfull node is refused in one line naming it and a layout that fits."""

from __future__ import annotations

import pytest

from decent.backends.ray.memory_plan import (
    ACTOR_RUNTIME_MB,
    RAY_DAEMONS_MB,
    Footprint,
    MemoryPlan,
    plan_memory,
)
from decent.backends.ray.node_memory import Node, check_nodes, lay_out, node_plans
from decent.backends.ray.placement import placement
from decent.core.errors import ConfigError

# an MLP run: 10 MB of model, 5 MB of data, 1 MB per client, nothing frozen, no messages
F = Footprint(model_mb=10.0, frozen_mb=0.0, per_client_mb=1.0, data_mb=5.0)
DRIVER_MB = 300.0


def actor_mb(clients: int) -> float:
    """One actor's own memory, by hand: its runtime, the data, the model, its clients."""
    return ACTOR_RUNTIME_MB + 5.0 + 10.0 + clients * 1.0


def plan_node(groups: list[list[int]], node: Node) -> MemoryPlan:
    return plan_memory(F, groups, False, node.memory_mb, DRIVER_MB if node.driver else 0.0,
                       "mlp")


def nodes(*specs: tuple[str, float, int, bool]) -> dict[str, Node]:
    return {c * 16: Node(c * 16, f"10.0.0.{k}", mb, slots, driver)
            for k, (c, mb, slots, driver) in enumerate(specs, 1)}


def test_each_node_holds_its_own_actors_and_the_driver_only_its_node():
    cluster = nodes(("a", 8000.0, 2, True), ("b", 8000.0, 2, False))
    groups = placement(8, 2)  # 4 actors of 2 clients
    plans = node_plans(groups, ["a" * 16, "b" * 16, "b" * 16, "a" * 16], cluster, plan_node)
    two = RAY_DAEMONS_MB + 2 * actor_mb(2)
    assert plans["b" * 16].node_mb == pytest.approx(two)
    assert plans["a" * 16].node_mb == pytest.approx(two + DRIVER_MB)
    assert plans["a" * 16].actors == plans["b" * 16].actors == 2


def test_an_overfull_node_is_named_with_a_clients_per_actor_that_fits():
    # spread put 2 actors on each worker; the small one (c) holds daemons + 2 actors =
    # 330 + 2 × 334 = 998 MB in 900 MB. Another size is needed (spread already ran): 3
    # actors of 3, 3, 2 clients — one of 3 on c (330 + 335 = 665 MB), the rest on b.
    cluster = nodes(("a", 8000.0, 0, True), ("b", 2000.0, 2, False), ("c", 900.0, 2, False))
    groups = placement(8, 2)
    with pytest.raises(ConfigError) as err:
        check_nodes(groups, ["b" * 16, "c" * 16, "b" * 16, "c" * 16], cluster, plan_node,
                    "spread")
    need = RAY_DAEMONS_MB + 2 * actor_mb(2)
    said = str(err.value)
    assert said.startswith(f"ray.clients_per_actor: node 10.0.0.3 (cccccccc) would need "
                           f"~{need:.0f} MB for its 2 actor(s) but has 900 MB (memory plan: ")
    assert said.endswith("; set ray.clients_per_actor=3 (3 actor(s): 2 on node 10.0.0.2 "
                         "(bbbbbbbb), 1 on node 10.0.0.3 (cccccccc))")


def test_packed_actors_that_fit_spread_get_ray_placement_spread():
    cluster = nodes(("b", 1200.0, 4, False), ("c", 1200.0, 4, False))
    groups = placement(8, 2)
    with pytest.raises(ConfigError) as err:
        check_nodes(groups, ["c" * 16] * 4, cluster, plan_node, "pack")
    assert str(err.value).endswith("; set ray.placement=spread (2 on node 10.0.0.1 "
                                   "(bbbbbbbb), 2 on node 10.0.0.2 (cccccccc))")


def test_no_layout_fits_and_a_fitting_plan_passes():
    small = nodes(("b", 500.0, 4, False), ("c", 500.0, 4, False))
    with pytest.raises(ConfigError, match="no layout over these nodes fits: use fewer "
                       "clients"):
        check_nodes(placement(8, 4), ["b" * 16, "c" * 16], small, plan_node, "spread")
    roomy = nodes(("b", 4000.0, 4, False), ("c", 4000.0, 4, False))
    plans = check_nodes(placement(8, 4), ["b" * 16, "c" * 16], roomy, plan_node, "spread")
    assert set(plans) == {"b" * 16, "c" * 16}
    # a node with no slot left gets nothing; one that runs out gives None
    assert lay_out(placement(8, 2), list(roomy.values()), plan_node) == {
        "b" * 16: [[0, 1], [4, 5]], "c" * 16: [[2, 3], [6, 7]]}
    assert lay_out(placement(9, 1), list(roomy.values()), plan_node) is None  # 9 > 8 slots
