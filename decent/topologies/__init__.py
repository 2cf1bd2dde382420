"""Communication topologies: which clients may talk to whom, and with which weights.

A run's ``topology`` section is validated against the config class of the graph its
``name`` picks in :data:`TOPOLOGIES` (a :class:`~decent.core.registry.Registry`: a user's
module may register a graph of its own) and turned into a :class:`Topology` by
:func:`build_topology`. The platform asks it for a :class:`RoundGraph` every round —
a plain-Python snapshot with neighbour lists, mixing weights and an O(1) edge test — so
strategies never touch networkx. Static graphs are checked to be connected up front (a
disconnected graph can never reach consensus); ``one_peer``/``two_peer`` draw fresh random
matchings each round. The mixing matrices and spectral figures here are the ones the
decentralized-optimisation literature states its convergence rates in.
"""

from __future__ import annotations

from decent.core.graph import GraphFacts, RoundGraph
from decent.topologies.analysis import diameter, format_summary, spectral_gap, summarize
from decent.topologies.builders import TOPOLOGIES, topology_config
from decent.topologies.config import TopologyConfig
from decent.topologies.mixing import laplacian, metropolis_weights, mixing_matrix, uniform_weights
from decent.topologies.topology import Topology, build_topology, snapshot, validate

__all__ = [
    "TOPOLOGIES",
    "GraphFacts",
    "RoundGraph",
    "Topology",
    "TopologyConfig",
    "build_topology",
    "diameter",
    "format_summary",
    "laplacian",
    "metropolis_weights",
    "mixing_matrix",
    "snapshot",
    "spectral_gap",
    "summarize",
    "topology_config",
    "uniform_weights",
    "validate",
]
