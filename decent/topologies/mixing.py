"""Mixing (gossip) matrices and graph Laplacians.

Every matrix here is indexed by node id ``0..n-1`` (the builders guarantee those labels),
so row ``i`` belongs to client ``i`` whatever order networkx stores the nodes in.
"""

from __future__ import annotations

import networkx as nx
import numpy as np

from decent.core.errors import ConfigError

MIXING_KINDS = ("metropolis", "uniform")


def _adjacency(G: nx.Graph) -> np.ndarray:
    """0/1 adjacency matrix in node-id order, ignoring any edge attributes and self-loops."""
    A = nx.to_numpy_array(G, nodelist=range(G.number_of_nodes()), weight=None)
    np.fill_diagonal(A, 0.0)
    return A


def metropolis_weights(G: nx.Graph) -> np.ndarray:
    """Metropolis–Hastings weights: ``w_ij = 1/(1+max(deg_i, deg_j))`` on edges.

    They need only the degrees of the two endpoints, so each client can compute its row
    locally, and the result is symmetric and doubly stochastic on any graph — which makes
    gossip averaging converge to the exact mean rather than a degree-weighted one.
    """
    A = _adjacency(G)
    deg = A.sum(axis=1)
    W = A / (1.0 + np.maximum.outer(deg, deg))
    np.fill_diagonal(W, 1.0 - W.sum(axis=1))
    return W


def uniform_weights(G: nx.Graph) -> np.ndarray:
    """Constant edge weight ``1/(1+max_degree)``; the rest of each row stays on the diagonal.

    Needs one global number (the maximum degree) but treats every edge alike, which is the
    textbook choice in many analyses; symmetric and doubly stochastic as well.
    """
    A = _adjacency(G)
    deg = A.sum(axis=1)
    alpha = 1.0 / (1.0 + deg.max(initial=0.0))
    W = alpha * A
    np.fill_diagonal(W, 1.0 - alpha * deg)
    return W


def push_matrix(G: nx.DiGraph) -> np.ndarray:
    """The column-stochastic mixing P of a directed graph: P[j, i] is the share of client
    i's mass that reaches j (i itself included); each column sums to 1."""
    n = G.number_of_nodes()
    P = np.zeros((n, n))
    for i in range(n):
        out = [j for j in G.successors(i) if j != i]
        share = 1.0 / (len(out) + 1)
        P[i, i] = share
        for j in out:
            P[j, i] = share
    return P


def mixing_matrix(G: nx.Graph, kind: str) -> np.ndarray:
    """The mixing matrix named by ``topology.weights``; on a directed graph, the
    column-stochastic push matrix (uniform out-shares: the one push-sum uses)."""
    if G.is_directed():
        return push_matrix(G)
    if kind == "metropolis":
        return metropolis_weights(G)
    if kind == "uniform":
        return uniform_weights(G)
    raise ConfigError(
        "topology.weights",
        f"unknown mixing weights '{kind}'; choose one of: {', '.join(MIXING_KINDS)}",
    )


def laplacian(G: nx.Graph, edge_weights: np.ndarray | None = None) -> np.ndarray:
    """Weighted Laplacian ``L = D − A`` with ``A_ij = λ_ij`` on the edges of ``G``.

    ``edge_weights`` is an ``n×n`` matrix read only on the edges of ``G`` (its diagonal and
    non-edge entries are ignored), so passing a mixing matrix ``W`` yields ``I − W``.
    Without it every edge weighs 1. Built from ``nx.to_numpy_array`` so that no sparse
    matrix library is required.
    """
    A = _adjacency(G)
    if edge_weights is not None:
        n = A.shape[0]
        edge_weights = np.asarray(edge_weights, dtype=float)
        if edge_weights.shape != (n, n):
            raise ValueError(f"edge_weights has shape {edge_weights.shape}, expected ({n}, {n})")
        A = A * edge_weights
    return np.diag(A.sum(axis=1)) - A
