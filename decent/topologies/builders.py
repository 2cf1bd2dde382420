"""Every graph builder by its ``topology.name``: the static ones take the config, the
time-varying ones the config and the round. (``two_tier`` is built by :class:`Topology`
itself: it needs the latency model to place its workers.)"""

from __future__ import annotations

from collections.abc import Callable

import networkx as nx

from decent.topologies.config import TopologyConfig
from decent.topologies.random_graphs import erdos_renyi, one_peer, random_regular, two_peer
from decent.topologies.shapes import (
    complete,
    edge_list,
    exponential,
    meshgrid,
    path,
    ring,
    star,
    torus,
)

STATIC_BUILDERS: dict[str, Callable[[TopologyConfig], nx.Graph]] = {
    "ring": ring,
    "path": path,
    "meshgrid": meshgrid,
    "torus": torus,
    "complete": complete,
    "star": star,
    "exponential": exponential,
    "erdos_renyi": erdos_renyi,
    "random_regular": random_regular,
    "edge_list": edge_list,
}
TIME_VARYING_BUILDERS: dict[str, Callable[[TopologyConfig, int], nx.Graph]] = {
    "one_peer": one_peer,
    "two_peer": two_peer,
}
