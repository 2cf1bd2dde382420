"""Every graph by its ``topology.name``: :data:`TOPOLOGIES`, config class and builder.

A static graph's builder takes its config (``build(cfg) -> nx.Graph``); a time-varying
one's (config class with ``TIME_VARYING = True``) takes the config and the round
(``build(cfg, round)``). Every builder returns nodes ``0..n-1``. A user's module adds a
graph with ``TOPOLOGIES.register(name, Config, build)``, ``Config`` subclassing
:class:`~decent.topologies.config.TopologyConfig`. (``two_tier`` places its workers by the
network model's latency: :class:`~decent.topologies.topology.Topology` builds it with
that; its registered builder is the round-robin placement, as without a latency model.)
"""

from __future__ import annotations

from decent.core.registry import Registry
from decent.topologies.config import (
    EdgeListConfig,
    ErdosRenyiConfig,
    GridConfig,
    MatchingConfig,
    RandomRegularConfig,
    TopologyConfig,
    TwoTierConfig,
)
from decent.topologies.directed import (
    DirectedConfig,
    OnePeerExponentialConfig,
    directed_exponential,
    directed_ring,
    one_peer_exponential,
)
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
from decent.topologies.two_tier import two_tier

TOPOLOGIES = Registry("topology")
for _name, _config, _build in (
    ("ring", TopologyConfig, ring),
    ("path", TopologyConfig, path),
    ("complete", TopologyConfig, complete),
    ("star", TopologyConfig, star),
    ("exponential", TopologyConfig, exponential),
    ("meshgrid", GridConfig, meshgrid),
    ("torus", GridConfig, torus),
    ("erdos_renyi", ErdosRenyiConfig, erdos_renyi),
    ("random_regular", RandomRegularConfig, random_regular),
    ("edge_list", EdgeListConfig, edge_list),
    ("two_tier", TwoTierConfig, two_tier),
    ("one_peer", MatchingConfig, one_peer),
    ("two_peer", MatchingConfig, two_peer),
    ("directed_ring", DirectedConfig, directed_ring),
    ("directed_exponential", DirectedConfig, directed_exponential),
    ("one_peer_exponential", OnePeerExponentialConfig, one_peer_exponential),
):
    TOPOLOGIES.register(_name, _config, _build)


def topology_config(section: dict | str) -> TopologyConfig:
    """The validated config of a ``topology`` section (``{name: ring, n: 16}``)."""
    return TOPOLOGIES.config(section)
