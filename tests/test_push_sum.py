"""Directed graphs and push-sum: the directed topologies edge for edge, the router's
direction check, SGP and OSGP against an independent numpy push-sum recursion, exact
bytes per directed edge, OSGP's overlapped clock, and both backends alike."""

from __future__ import annotations

import json

import numpy as np
import pytest

from decent.core.errors import ConfigError, StrategyError
from decent.core.messages import Message
from decent.engine.config import from_dict
from decent.network.router import Router
from decent.run.runner import run
from decent.tasks.linear_regression import LinearRegressionConfig, LinearRegressionTask
from decent.tools.cli import main
from decent.topologies import build_topology
from decent.topologies.mixing import push_matrix
from tests.helpers import assert_ray_equals_local, engine_for, method_config, tiny

# strongly connected, not regular: client 0 pushes to two, the others to one, so the
# push-sum weights move away from 1 and the de-biasing is exercised
EDGES = [[0, 1], [1, 2], [2, 3], [3, 0], [0, 2]]
DIM, LR, ROUNDS, STEPS = 3, 0.05, 5, 2


def edges_of(G) -> set[tuple[int, int]]:
    return {(int(i), int(j)) for i, j in G.edges}


def test_directed_graphs_edge_for_edge():
    ring = build_topology({"name": "directed_ring", "n": 5})
    assert edges_of(ring.graph()) == {(i, (i + 1) % 5) for i in range(5)}
    expo = build_topology({"name": "directed_exponential", "n": 8})
    assert edges_of(expo.graph()) == {(i, (i + h) % 8) for i in range(8) for h in (1, 2, 4)}
    # the authors' order: +1, -1, +2, -2, +4, -4, then again
    one = build_topology({"name": "one_peer_exponential", "n": 8})
    hops = [1, -1, 2, -2, 4, -4, 1]
    for r, h in enumerate(hops):
        assert edges_of(one.graph(r)) == {(i, (i + h) % 8) for i in range(8)}, r
    for topology in (ring, expo, one):
        facts = topology.facts()
        assert facts.directed and facts.strongly_connected
        P = topology.mixing_matrix(3)
        np.testing.assert_allclose(P.sum(axis=0), 1.0)  # column-stochastic
    graph = expo.round_graph(0)
    assert graph.neighbors[0] == (1, 2, 4) and graph.in_neighbors[0] == (4, 6, 7)
    assert graph.weights[0] == {1: 0.25, 2: 0.25, 4: 0.25, 0: 0.25}
    assert graph.has_edge(0, 1) and not graph.has_edge(1, 0)
    listed = build_topology({"name": "edge_list", "n": 3, "directed": True,
                             "edges": [[0, 1], [1, 2]]})
    assert listed.facts().strongly_connected is False
    assert build_topology({"name": "edge_list", "n": 4, "directed": True,
                           "edges": EDGES}).facts().strongly_connected
    # undirected graphs as before: both ways, symmetric rows
    undirected = build_topology({"name": "ring", "n": 5}).round_graph(0)
    assert not undirected.directed and undirected.in_neighbors == undirected.neighbors


def test_a_message_against_an_edge_is_a_non_edge():
    topology = build_topology({"name": "directed_ring", "n": 4})
    router = Router(topology, "sgp", engine_network(4))
    router.post(0, "local", [Message(0, 1, "push", None)])
    with pytest.raises(StrategyError, match=r"\(1, 0\) is not an edge"):
        router.post(0, "local", [Message(1, 0, "push", None)])


def engine_network(n: int):
    from decent.network.timing import Network, NetworkConfig

    return Network(NetworkConfig(), n, 0)


class FixedTime:
    """A network whose phase takes its slowest compute plus ``transfer`` seconds when
    anything is sent."""

    def __init__(self, transfer: float) -> None:
        self.transfer = transfer

    def phase_time(self, edges, compute=None):
        slowest = max((compute or {}).values(), default=0.0)
        return slowest + (self.transfer if edges else 0.0), slowest


@pytest.mark.parametrize("transfer, tau, expected", [
    (0.3, 1, [1.0, 1.0, 1.0, 1.0]),  # the push lands during the next round's compute
    (2.5, 1, [1.0, 2.5, 2.5, 2.5]),  # each round waits for the last one's push
    (2.5, 2, [1.0, 1.0, 1.5, 1.0]),  # two rounds to land in: one wait of 0.5, then none
    (0.3, 0, [1.3, 1.3, 1.3, 1.3]),  # not overlapped: compute, then the transfer
])
def test_overlapped_pushes_hold_up_only_the_round_that_reads_them(transfer, tau, expected):
    """One phase a round, 1 s of compute each, and a push per round: a round reads what
    was pushed τ rounds before and waits only for what has not arrived."""
    topology = build_topology({"name": "directed_ring", "n": 2})
    router = Router(topology, "osgp", FixedTime(transfer))  # type: ignore[arg-type]
    times = []
    for r in range(4):
        router.post(r, "step", [Message(0, 1, "push", None, nbytes=4, overlap=tau)],
                    compute={0: 1.0, 1: 1.0})
        router.advance()
        times.append(router.end_round().sim_time_s)
    assert times == pytest.approx(expected)


def regression_config(tmp_path, name: str, **strategy) -> dict:
    return tiny(tmp_path, rounds=ROUNDS, topology={"name": "edge_list", "n": 4,
                                                   "directed": True, "edges": EDGES},
                strategy={"name": name, "local_steps": STEPS, "batch_size": 1, "lr": LR,
                          **strategy},
                task={"name": "linear_regression", "dim": DIM, "samples_per_client": 1},
                model={"name": "mlp", "hidden": []}, eval={"every": ROUNDS})


def reference(theta0: np.ndarray, tau: int | None) -> np.ndarray:
    """Push-sum SGD in float64 (SGP when ``tau`` is None, else OSGP with overlap τ) on
    f_i(θ) = (x_i·w + b − y_i)², from the numerators x_i and weights w_i alone."""
    task = LinearRegressionTask(LinearRegressionConfig(dim=DIM, samples_per_client=1), 0)
    data = task.client_data(list(range(4)), "cpu")
    P = push_matrix(build_topology({"name": "edge_list", "n": 4, "directed": True,
                                    "edges": EDGES}).graph())
    x = np.tile(theta0, (4, 1)).astype(np.float64)
    w = np.ones(4)
    in_flight: list[tuple[int, np.ndarray, np.ndarray]] = []  # (due round, x, w)

    def steps() -> None:
        for i in range(4):
            a, y = data[i].x[0].double().numpy(), float(data[i].y[0])
            for _ in range(STEPS):
                z = x[i] / w[i]
                r = a @ z[:DIM] + z[DIM] - y
                x[i] -= LR * np.concatenate([2 * r * a, [2 * r]])

    for t in range(ROUNDS):
        if tau is None:
            steps()
            x, w = P @ x, P @ w
            continue
        for _due, dx, dw in [f for f in in_flight if f[0] == t]:
            x, w = x + dx, w + dw
        in_flight = [f for f in in_flight if f[0] != t]
        off = P - np.diag(np.diag(P))
        in_flight.append((t + tau, off @ x, off @ w))
        x, w = np.diag(P)[:, None] * x, np.diag(P) * w
        steps()
    return x / w[:, None]


@pytest.mark.parametrize("name, tau", [("sgp", None), ("osgp", 1), ("osgp", 2)])
def test_push_sum_follows_the_numpy_recursion(tmp_path, name, tau):
    extra = {} if tau is None else {"overlap": tau}
    cfg = from_dict(regression_config(tmp_path, name, **extra))
    engine = engine_for(cfg)
    theta0 = engine.client_vectors()[0]
    for r in range(ROUNDS):
        engine.run_round(r)
    got = engine.client_vectors()
    engine.close()
    want = reference(theta0, tau)
    for cid in range(4):
        np.testing.assert_allclose(got[cid], want[cid], rtol=2e-5, atol=1e-6)
    assert not np.allclose(want[0], want[1])  # the clients differ: a real test of mixing


def test_bytes_per_directed_edge_are_the_model_and_a_four_byte_weight(tmp_path):
    result = run(from_dict(regression_config(tmp_path, "sgp")))
    edges = json.loads((result.run_dir / "edges.json").read_text())
    per_round = 4 * (DIM + 1) + 4  # a float32 numerator per parameter, and the weight
    assert edges == {f"{i}-{j}": ROUNDS * per_round for i, j in EDGES}
    assert result.rows[0]["bytes"] == len(EDGES) * per_round


def test_graphs_a_method_cannot_use_are_one_line(tmp_path, capsys):
    import yaml

    def refused(**sections) -> str:
        path = tmp_path / "c.yaml"
        path.write_text(yaml.safe_dump(tiny(tmp_path, **sections)))
        assert main(["run", str(path)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and not (tmp_path / "runs").exists(), err
        return err[0]

    assert "directed_ring is a directed graph and strategy 'dsgd'" in refused(
        topology={"name": "directed_ring", "n": 4})
    assert "strategy 'sgp' needs every client to reach every other" in refused(
        topology={"name": "edge_list", "n": 3, "directed": True, "edges": [[0, 1], [1, 2]]},
        strategy={"name": "sgp"})
    with pytest.raises(ConfigError, match=r"strategy\.overlap"):
        from_dict(tiny(tmp_path, strategy={"name": "osgp", "overlap": 0}))


@pytest.mark.parametrize("name", ["sgp", "osgp"])
def test_ray_runs_push_sum_as_the_local_backend(tmp_path, ray_session, name):
    assert_ray_equals_local(method_config(tmp_path, name, 6, rounds=3), 2)
