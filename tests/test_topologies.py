"""Topologies: graph shapes, mixing matrices, spectral figures and config errors."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest

from decent.core.errors import ConfigError
from decent.topologies import (
    TOPOLOGIES,
    RoundGraph,
    TopologyConfig,
    build_topology,
    format_summary,
    laplacian,
    metropolis_weights,
    mixing_matrix,
    snapshot,
    spectral_gap,
    summarize,
    uniform_weights,
)
from decent.topologies.analysis import diameter


def build(name: str, n: int = 16, **kw):
    return build_topology({"name": name, "n": n, **kw})


def edge_set(G: nx.Graph) -> set[frozenset[int]]:
    return {frozenset(e) for e in G.edges}


# ---------------------------------------------------------------- shapes


@pytest.mark.parametrize("n", [3, 5, 16])
def test_ring(n):
    G = build("ring", n).graph(0)
    assert sorted(G.nodes) == list(range(n))
    assert G.number_of_edges() == n
    assert all(d == 2 for _, d in G.degree())
    assert diameter(G) == n // 2
    assert G.has_edge(n - 1, 0)


@pytest.mark.parametrize("n, rows, cols", [(16, 4, 4), (12, 3, 4), (6, 2, 3), (20, 4, 5)])
def test_meshgrid_default_rows(n, rows, cols):
    G = build("meshgrid", n).graph(0)
    assert sorted(G.nodes) == list(range(n))
    assert G.number_of_edges() == 2 * rows * cols - rows - cols
    assert diameter(G) == rows + cols - 2
    # Row-major numbering: right and down neighbours, no wrap-around.
    assert G.has_edge(0, 1) and G.has_edge(0, cols)
    assert not G.has_edge(cols - 1, cols)
    if rows > 2:
        assert not G.has_edge(0, n - cols)


def test_meshgrid_explicit_rows():
    G = build("meshgrid", 12, rows=2).graph(0)  # 2×6
    assert G.number_of_edges() == 2 * 2 * 6 - 2 - 6
    assert diameter(G) == 2 + 6 - 2


@pytest.mark.parametrize("n", [9, 12, 16, 20])
def test_torus(n):
    G = build("torus", n).graph(0)
    assert G.number_of_edges() == 2 * n
    assert all(d == 4 for _, d in G.degree())
    assert nx.is_connected(G)


def test_torus_wraps_row_major():
    G = build("torus", 12, rows=3).graph(0)  # 3×4
    assert G.has_edge(0, 3)  # end of row 0 wraps to its start
    assert G.has_edge(0, 8)  # top of column 0 wraps to its bottom


@pytest.mark.parametrize("n", [2, 7, 16])
def test_complete(n):
    G = build("complete", n).graph(0)
    assert G.number_of_edges() == n * (n - 1) // 2
    assert diameter(G) == 1


@pytest.mark.parametrize("n", [3, 16])
def test_star_hub_at_zero(n):
    G = build("star", n).graph(0)
    assert G.number_of_edges() == n - 1
    assert G.degree(0) == n - 1
    assert all(G.degree(i) == 1 for i in range(1, n))
    assert diameter(G) == 2


@pytest.mark.parametrize("n", [5, 16, 20])
def test_exponential(n):
    expected = set()
    k = 0
    while 2**k < n:
        for i in range(n):
            for j in ((i + 2**k) % n, (i - 2**k) % n):
                expected.add(frozenset((i, j)))
        k += 1
    G = build("exponential", n).graph(0)
    assert edge_set(G) == expected
    if n == 16:  # hops 1, 2, 4 give 16 edges each; hop 8 pairs i with i+8: 8 edges
        assert G.number_of_edges() == 56


def test_erdos_renyi_seeded():
    a = build("erdos_renyi", 20, p=0.3, seed=1).graph(0)
    b = build("erdos_renyi", 20, p=0.3, seed=1).graph(0)
    c = build("erdos_renyi", 20, p=0.3, seed=2).graph(0)
    assert nx.is_connected(a)
    assert edge_set(a) == edge_set(b)
    assert edge_set(a) != edge_set(c)


@pytest.mark.parametrize("n, d", [(10, 3), (16, 4), (12, 5)])
def test_random_regular(n, d):
    G = build("random_regular", n, degree=d, seed=3).graph(0)
    assert G.number_of_edges() == n * d // 2
    assert all(deg == d for _, deg in G.degree())
    assert nx.is_connected(G)
    again = build("random_regular", n, degree=d, seed=3).graph(0)
    assert edge_set(G) == edge_set(again)


def test_edge_list():
    edges = [[0, 1], [1, 2], [2, 3], [3, 0], [0, 2]]
    G = build("edge_list", 4, edges=edges).graph(0)
    assert edge_set(G) == {frozenset(e) for e in edges}


@pytest.mark.parametrize("name", [t for t in TOPOLOGIES.names
                                  if t not in ("one_peer", "two_peer", "one_peer_exponential")])
def test_static_topologies_connected_and_constant(name):
    edges = [[i, (i + 1) % 16] for i in range(16)]
    topo = build(name, 16, **({"edges": edges} if name == "edge_list" else {}))
    assert not topo.time_varying
    G0 = topo.graph(0)
    assert sorted(G0.nodes) == list(range(16))
    assert nx.is_strongly_connected(G0) if G0.is_directed() else nx.is_connected(G0)
    assert edge_set(topo.graph(7)) == edge_set(G0)
    assert topo.round_graph(3) == topo.round_graph(0)


# ---------------------------------------------------------------- time-varying


@pytest.mark.parametrize("name, max_deg", [("one_peer", 1), ("two_peer", 2)])
@pytest.mark.parametrize("n", [15, 16])
def test_time_varying(name, max_deg, n):
    topo = build(name, n, seed=5)
    assert topo.time_varying
    graphs = [edge_set(topo.graph(r)) for r in range(6)]
    for r in range(6):
        G = topo.graph(r)
        assert sorted(G.nodes) == list(range(n))
        assert max(d for _, d in G.degree()) <= max_deg
    if name == "one_peer":
        assert all(len(g) == n // 2 for g in graphs)  # a perfect matching (one idle if odd)
    assert len({frozenset(g) for g in graphs}) > 1
    # Same (seed, round) → same graph, even from a fresh topology and out of order.
    other = build(name, n, seed=5)
    assert edge_set(other.graph(4)) == graphs[4]
    assert edge_set(other.graph(1)) == graphs[1]
    assert edge_set(build(name, n, seed=6).graph(4)) != graphs[4]


def test_time_varying_round_graph_follows_round():
    topo = build("one_peer", 16, seed=0)
    for r in (0, 1, 2, 1):
        rg = topo.round_graph(r)
        G = topo.graph(r)
        assert all(rg.has_edge(u, v) and rg.has_edge(v, u) for u, v in G.edges)
        assert rg.num_directed_edges() == 2 * G.number_of_edges()


# ---------------------------------------------------------------- mixing


def sample_graphs():
    yield nx.cycle_graph(7)
    yield nx.star_graph(9)
    yield build("meshgrid", 12).graph(0)
    yield build("erdos_renyi", 15, p=0.3, seed=4).graph(0)
    yield build("one_peer", 9, seed=1).graph(2)  # idle node and isolated pairs
    yield nx.path_graph(5)


@pytest.mark.parametrize("fn", [metropolis_weights, uniform_weights])
def test_mixing_symmetric_doubly_stochastic(fn):
    for G in sample_graphs():
        W = fn(G)
        n = G.number_of_nodes()
        assert W.shape == (n, n)
        np.testing.assert_allclose(W, W.T)
        np.testing.assert_allclose(W.sum(axis=0), 1.0)
        np.testing.assert_allclose(W.sum(axis=1), 1.0)
        assert (W >= -1e-12).all()
        # Support is exactly the graph's edges plus the diagonal.
        A = nx.to_numpy_array(G, nodelist=range(n)) > 0
        off = ~np.eye(n, dtype=bool)
        assert ((W[off] > 0) == A[off]).all()


def test_metropolis_values():
    G = nx.star_graph(3)  # hub degree 3, leaves degree 1
    W = metropolis_weights(G)
    assert W[0, 1] == pytest.approx(1 / 4)
    assert W[1, 1] == pytest.approx(3 / 4)
    assert W[0, 0] == pytest.approx(1 - 3 / 4)
    assert W[1, 2] == 0


def test_uniform_values():
    G = nx.path_graph(3)  # degrees 1, 2, 1
    W = uniform_weights(G)
    assert W[0, 1] == pytest.approx(1 / 3)
    assert W[0, 0] == pytest.approx(1 - 1 / 3)
    assert W[1, 1] == pytest.approx(1 - 2 / 3)


def test_mixing_matrix_dispatch():
    G = nx.cycle_graph(5)
    np.testing.assert_array_equal(mixing_matrix(G, "metropolis"), metropolis_weights(G))
    np.testing.assert_array_equal(mixing_matrix(G, "uniform"), uniform_weights(G))
    with pytest.raises(ConfigError) as e:
        mixing_matrix(G, "laplace")
    assert e.value.field == "topology.weights"


@pytest.mark.parametrize("name", ["ring", "star", "meshgrid", "two_peer"])
@pytest.mark.parametrize("weights", ["metropolis", "uniform"])
def test_round_graph_matches_graph(name, weights):
    topo = build(name, 12, weights=weights, **({"seed": 2} if name == "two_peer" else {}))
    G, W, rg = topo.graph(1), topo.mixing_matrix(1), topo.round_graph(1)
    assert isinstance(rg, RoundGraph)
    assert rg.n == 12
    for i in range(12):
        assert rg.neighbors[i] == tuple(sorted(G.adj[i]))
        assert rg.degree(i) == G.degree(i)
        assert set(rg.weights[i]) == set(G.adj[i]) | {i}
        assert sum(rg.weights[i].values()) == pytest.approx(1.0)
        for j, w in rg.weights[i].items():
            assert w == pytest.approx(W[i, j])
        for j in range(12):
            assert rg.has_edge(i, j) == G.has_edge(i, j)
    assert rg.num_directed_edges() == 2 * G.number_of_edges()


def test_round_graph_from_graph_direct():
    G = nx.path_graph(4)
    rg = snapshot(G, metropolis_weights(G))
    assert rg.neighbors == ((1,), (0, 2), (1, 3), (2,))
    assert rg.has_edge(1, 2) and rg.has_edge(2, 1)
    assert not rg.has_edge(0, 2) and not rg.has_edge(0, 0)


def test_laplacian_unweighted():
    G = build("meshgrid", 12).graph(0)
    L = laplacian(G)
    np.testing.assert_allclose(L.sum(axis=1), 0.0)
    np.testing.assert_allclose(np.diag(L), [G.degree(i) for i in range(12)])
    np.testing.assert_allclose(L, nx.laplacian_matrix(G, nodelist=range(12)).toarray())


def test_laplacian_from_mixing_weights():
    for G in sample_graphs():
        n = G.number_of_nodes()
        W = metropolis_weights(G)
        W_off = W - np.diag(np.diag(W))
        L = laplacian(G, W_off)
        np.testing.assert_allclose(L.sum(axis=1), 0.0, atol=1e-12)
        np.testing.assert_allclose(L, np.diag(1 - np.diag(W)) - W_off, atol=1e-12)
        # The diagonal of the weights is ignored, so W itself gives I − W as well.
        np.testing.assert_allclose(laplacian(G, W), np.eye(n) - W, atol=1e-12)


# ---------------------------------------------------------------- spectra


@pytest.mark.parametrize("n", [3, 4, 8, 16, 33])
def test_spectral_gap_ring_closed_form(n):
    W = metropolis_weights(nx.cycle_graph(n))
    assert np.allclose(W[W > 0][~np.isclose(W[W > 0], 1 / 3)], [])  # all weights 1/3
    lam = [1 / 3 + 2 / 3 * math.cos(2 * math.pi * k / n) for k in range(1, n)]
    expected = 1 - max(abs(x) for x in lam)
    assert spectral_gap(W) == pytest.approx(expected, abs=1e-12)


def test_spectral_gap_extremes():
    n = 10
    assert spectral_gap(np.full((n, n), 1 / n)) == pytest.approx(1.0)
    assert spectral_gap(np.eye(n)) == 0.0
    one_peer = build("one_peer", 8).mixing_matrix(0)  # disconnected: no mixing across pairs
    assert spectral_gap(one_peer) == 0.0


def test_diameter_disconnected_is_inf():
    G = build("one_peer", 8).graph(0)
    assert diameter(G) == math.inf


def test_summarize_and_format():
    s = summarize(build("ring", 16))
    assert s["n"] == 16 and s["edges"] == 16
    assert (s["min_degree"], s["max_degree"]) == (2, 2)
    assert s["diameter"] == 8
    assert s["spectral_gap"] == pytest.approx(2 / 3 * (1 - math.cos(2 * math.pi / 16)))
    assert s["time_varying"] is False
    text = format_summary(s)
    lines = text.splitlines()
    assert lines[0].split() == ["topology", "ring"]
    assert "spectral gap" in text and "redrawn" not in text
    values_at = {line.index(line.split()[-1]) for line in lines if not line.startswith("spec")}
    assert len(values_at) == 1  # values aligned in one column

    tv = summarize(build("two_peer", 16))
    assert tv["time_varying"] is True
    assert "redrawn every round" in format_summary(tv)


# ---------------------------------------------------------------- config errors


def raises_on(field: str, **kw) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        build_topology(kw)
    assert e.value.field == field, e.value
    return e.value


def test_unknown_name():
    err = raises_on("topology.name", name="hypercube")
    assert "ring" in err.message and "one_peer" in err.message


def test_meshgrid_prime_n():
    err = raises_on("topology.n", name="meshgrid", n=13)
    assert "prime" in err.message and "12" in err.message and "topology.rows" in err.message


def test_meshgrid_bad_rows():
    raises_on("topology.rows", name="meshgrid", n=12, rows=5)
    raises_on("topology.rows", name="meshgrid", n=12, rows=1)
    raises_on("topology.rows", name="meshgrid", n=12, rows=12)  # cols = 1


def test_torus_needs_sides_of_three():
    raises_on("topology.n", name="torus", n=8)  # only 2×4
    raises_on("topology.rows", name="torus", n=12, rows=2)


def test_disconnected_edge_list():
    err = raises_on("topology", name="edge_list", n=4, edges=[[0, 1], [2, 3]])
    assert "disconnected" in err.message and "components: 2" in err.message


def test_edge_list_bad_edges():
    raises_on("topology.edges[1]", name="edge_list", n=3, edges=[[0, 1], [1, 3]])
    raises_on("topology.edges[0]", name="edge_list", n=3, edges=[[0, 0]])
    raises_on("topology.edges[0]", name="edge_list", n=3, edges=[[0, 1, 2]])
    raises_on("topology.edges", name="edge_list", n=3)


@pytest.mark.parametrize("name", ["ring", "star", "one_peer"])
def test_n_too_small(name):
    raises_on("topology.n", name=name, n=1)


def test_single_client_is_a_complete_graph_on_one_vertex():
    topology = build_topology(TopologyConfig(name="complete", n=1))
    rg = topology.round_graph(0)
    assert rg.neighbors == ((),) and rg.weights[0] == {0: 1.0}
    raises_on("topology.n", name="complete", n=0)


def test_erdos_renyi_p_too_small():
    err = raises_on("topology.p", name="erdos_renyi", n=50, p=0.01)
    assert "too small" in err.message and "ln(n)" in err.message
    raises_on("topology.p", name="erdos_renyi", n=10, p=0.0)


def test_random_regular_bad_degree():
    raises_on("topology.degree", name="random_regular", n=9, degree=3)  # n·d odd
    raises_on("topology.degree", name="random_regular", n=6, degree=6)


def test_bad_weights():
    raises_on("topology.weights", name="ring", weights="laplace")
