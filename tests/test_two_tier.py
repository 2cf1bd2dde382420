"""The two-tier graph: aggregators on a complete overlay, each worker attached to the
aggregator nearest by the network model's latency (ties round robin from the worker id),
the assignment in the graph facts and the run summary, and bad sizes refused."""

from __future__ import annotations

import json

import pytest

from decent.core.errors import ConfigError
from decent.engine.config import from_dict
from decent.engine.plan import build_plan
from decent.network.timing import Network, NetworkConfig, Spread
from decent.run.runner import run
from decent.tools.cli import main
from decent.topologies import build_topology
from tests.helpers import tiny


def test_each_worker_joins_the_aggregator_with_the_lowest_latency():
    n, A = 20, 4
    network = Network(NetworkConfig(latency_ms=20, latency_spread=Spread(dist="uniform",
                                                                           low=0.1, high=3.0)),
                      n, seed=5)
    topology = build_topology({"name": "two_tier", "n": n, "aggregators": A},
                              lambda i, j: network.link(i, j)[1])
    for w in range(A, n):  # an independent argmin over the drawn latencies
        latencies = [network.link(w, a)[1] for a in range(A)]
        assert topology.assignment[w] == latencies.index(min(latencies))
    G = topology.graph()
    for a in range(A):  # the overlay is complete
        assert set(range(A)) - {a} <= set(G.adj[a])
    for w in range(A, n):
        assert set(G.adj[w]) == {topology.assignment[w]}
    facts = topology.facts()
    assert facts.tiers == (*range(A), *(topology.assignment[w] for w in range(A, n)))
    assert len(set(topology.assignment.values())) > 1  # the spread spreads them


def test_equal_latencies_give_balanced_round_robin_tiers():
    topology = build_topology({"name": "two_tier", "n": 14, "aggregators": 4})
    assert topology.assignment == {w: w % 4 for w in range(4, 14)}
    flat = Network(NetworkConfig(latency_ms=10), 14, seed=0)  # every link the same
    same = build_topology({"name": "two_tier", "n": 14, "aggregators": 4},
                          lambda i, j: flat.link(i, j)[1])
    assert same.assignment == topology.assignment


def test_a_run_logs_the_assignment_and_uses_the_configured_latencies(tmp_path):
    cfg = tiny(tmp_path, rounds=1, topology={"name": "two_tier", "n": 9, "aggregators": 3},
               network={"latency_ms": 5, "latency_spread": {"dist": "lognormal", "sigma": 1}})
    plan = build_plan(from_dict(cfg))
    result = run(from_dict(cfg))
    logged = json.loads((result.run_dir / "summary.json").read_text())["aggregator_of"]
    assert {int(w): a for w, a in logged.items()} == plan.topology.assignment
    for w, a in plan.topology.assignment.items():
        assert plan.network.link(w, a)[1] == min(plan.network.link(w, b)[1] for b in range(3))


@pytest.mark.parametrize("aggregators", [9, 12])
def test_too_many_aggregators_is_one_line(tmp_path, capsys, aggregators):
    with pytest.raises(ConfigError) as err:
        build_topology({"name": "two_tier", "n": 9, "aggregators": aggregators})
    assert err.value.field == "topology.aggregators"
    assert main(["topo", "two_tier", "--n", "9", "--aggregators", str(aggregators)]) == 2
    assert "topology.aggregators" in capsys.readouterr().err


def test_decent_topo_describes_a_two_tier_graph(capsys):
    assert main(["topo", "two_tier", "--n", "10", "--aggregators", "3"]) == 0
    out = capsys.readouterr().out
    assert "two_tier" in out and "10" in out
