"""CHOCO-SGD: exact gossip without compression, compressed bytes, the tracking invariant."""

import math

import numpy as np
import pytest
import torch

from decent.backends.local import local_engine
from decent.core.errors import ConfigError
from decent.engine.config import from_dict
from decent.models import params
from decent.run.runner import check
from tests.helpers import tiny


def run_rounds(cfg, rounds):
    backend = local_engine(cfg)
    traffic = [backend.run_round(r)[1] for r in range(rounds)]
    return backend, traffic


def test_identity_compressor_with_unit_step_is_dsgd(tmp_path):
    common = {"local_steps": 2, "batch_size": 8, "lr": 0.1}
    dsgd, _ = run_rounds(from_dict(tiny(tmp_path, strategy={"name": "dsgd", **common})), 4)
    choco, _ = run_rounds(from_dict(tiny(tmp_path, strategy={
        "name": "choco", "gossip_step": 1.0, "compression": {"name": "identity"}, **common,
    })), 4)
    ref = dsgd.client_vectors()
    for cid, vec in choco.client_vectors().items():
        np.testing.assert_allclose(vec, ref[cid], rtol=0, atol=1e-5)
    # and it is not trivially so: the clients disagree, and they trained
    assert np.abs(ref[0] - ref[3]).max() > 1e-3


def test_topk_bytes_per_edge_are_k_index_value_pairs(tmp_path):
    cfg = from_dict(tiny(tmp_path, strategy={
        "name": "choco", "compression": {"name": "topk", "keep": 0.01, "value_dtype": "float16"},
    }))
    backend, traffic = run_rounds(cfg, 2)
    k = sum(max(1, math.ceil(0.01 * p.numel()))
            for p in params.trainable_params(backend.group.base_model).values())
    for t in traffic:
        assert set(t.edge_bytes.values()) == {k * (4 + 2)}
        assert len(t.edge_bytes) == 2 * 6  # ring of 6: every client to both neighbours


@pytest.mark.parametrize("compression", [{"name": "topk", "keep": 0.05}, {"name": "int8"}])
def test_running_sum_tracks_the_neighbours_public_copies(tmp_path, compression):
    """s_i = Σ_j w_ij θ̂_j, where θ̂_j is what client j itself holds as its public copy."""
    cfg = from_dict(tiny(tmp_path, strategy={"name": "choco", "gossip_step": 0.5,
                                             "compression": compression}))
    backend, _ = run_rounds(cfg, 5)
    clients = backend.group.clients
    graph = backend.group.topology.round_graph(0)
    for i, client in clients.items():
        for name, s in client.state.mixed.items():
            expected = sum(w * clients[j].state.public[name]
                           for j, w in graph.weights[i].items())
            torch.testing.assert_close(s, expected, rtol=0, atol=1e-5)
        # public copies lag the private models but follow them
        assert not torch.equal(client.state.public[name], params.snapshot(client.model)[name])


def test_compressed_choco_trains_like_dsgd(tmp_path):
    common = {"lr": 0.3, "local_steps": 2}
    dsgd, _ = run_rounds(from_dict(tiny(tmp_path, strategy={"name": "dsgd", **common})), 30)
    choco, _ = run_rounds(from_dict(tiny(tmp_path, strategy={
        "name": "choco", "gossip_step": 0.5, "compression": {"name": "topk", "keep": 0.1},
        **common})), 30)
    ref = dsgd.evaluate(per_client=False)
    got = choco.evaluate(per_client=False)
    print(f"30 rounds: dsgd acc {ref['gmp_accuracy']:.3f}, choco top-10% {got['gmp_accuracy']:.3f}")
    assert got["gmp_accuracy"] > 0.7  # chance is 0.1
    assert got["gmp_accuracy"] > ref["gmp_accuracy"] - 0.05


def test_choco_needs_a_static_graph(tmp_path):
    cfg = from_dict(tiny(tmp_path, topology={"name": "one_peer", "n": 6},
                         strategy={"name": "choco"}))
    with pytest.raises(ConfigError) as err:
        check(cfg)
    assert err.value.field == "topology.name"


def test_choco_refuses_error_feedback(tmp_path):
    with pytest.raises(ConfigError) as err:
        from_dict(tiny(tmp_path, strategy={
            "name": "choco", "compression": {"name": "topk", "error_feedback": True}}))
    assert err.value.field == "strategy.compression.error_feedback"
