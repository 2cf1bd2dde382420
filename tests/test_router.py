import pytest
import torch

from decent.core.errors import StrategyError
from decent.core.messages import Message, Seed, wire_size
from decent.network.router import Router
from decent.network.timing import Network, NetworkConfig
from decent.topologies import TopologyConfig, build_topology


def make_router(name="ring", n=5, net=None):
    return Router(build_topology(TopologyConfig(name=name, n=n)), "dummy",
                  Network(net or NetworkConfig(), n, 0))


def msg(src, dst, payload, seq=0):
    return Message(src, dst, "t", payload, seq=seq, nbytes=wire_size(payload))


def test_non_edge_is_refused_with_names():
    router = make_router()
    with pytest.raises(StrategyError) as err:
        router.post(7, "gossip", [msg(0, 2, Seed(1))])
    text = str(err.value)
    for part in ("'dummy'", "client 0", "client 2", "round 7", "'gossip'", "ring"):
        assert part in text


def test_inboxes_sorted_by_source_then_sequence():
    router = make_router(n=5)
    router.post(0, "p", [msg(4, 0, Seed(40), seq=1), msg(1, 0, Seed(10), seq=0)])
    router.post(0, "p", [msg(4, 0, Seed(41), seq=0), msg(1, 0, Seed(11), seq=1)])
    assert router.take([0]) == {0: []}  # nothing is delivered before the phase closes
    router.advance()
    inbox = router.take([0, 1])
    assert [(m.src, m.seq) for m in inbox[0]] == [(1, 0), (1, 1), (4, 0), (4, 1)]
    assert inbox[1] == []
    assert router.take([0]) == {0: []}  # taken once


def test_bytes_per_directed_edge_and_round():
    router = make_router(n=4)
    t = torch.zeros(10)  # 40 bytes
    router.post(0, "p", [msg(0, 1, t), msg(1, 0, t), msg(0, 3, Seed(0))])
    router.advance()
    router.post(0, "q", [msg(0, 1, t)])
    router.advance()
    traffic = router.end_round()
    assert traffic.bytes == 40 + 40 + 8 + 40
    assert traffic.messages == 4
    assert traffic.edge_bytes == {(0, 1): 80, (1, 0): 40, (0, 3): 8}
    assert traffic.max_edge_bytes == 80
    router.post(1, "p", [msg(1, 0, t)])
    router.advance()
    second = router.end_round()
    assert second.bytes == 40
    assert router.total_bytes == 168
    assert router.max_edge_bytes_total == 80
    assert router.total_edge_bytes[(1, 0)] == 80


@pytest.mark.parametrize("model", ["maxmin", "bottleneck"])
def test_phase_time_link_and_node_caps(model):
    net = Network(NetworkConfig(model=model, link_mbps=10, node_mbps=100, latency_ms=5), 21, 0)
    # one 1.25 MB transfer on a 10 Mbps link: 1 s, plus 5 ms latency
    assert net.phase_time({(0, 1): 1_250_000})[0] == pytest.approx(1.005)
    # twenty 1.25 MB sends out of node 0: the 100 Mbps node cap (2 s) dominates the link (1 s)
    edges = {(0, j): 1_250_000 for j in range(1, 21)}
    assert net.phase_time(edges)[0] == pytest.approx(2.005)
    assert net.phase_time({}) == (0.0, 0.0)
