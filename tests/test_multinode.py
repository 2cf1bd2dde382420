"""Several nodes for real: a head without CPUs and two one-CPU worker nodes, each its own
raylet and object store (tests/cluster_bed.py, in a process of its own), and runs joined
to it by address. Actors spread over both nodes by default and are bit-identical to the
local backend; ``pack`` and ``spread`` lay half-CPU actors out on one node and on two;
``strict_spread`` beyond the nodes is one line; a worker node removed mid-run is a crash
of its clients under ``churn`` and, under ``restart``, a run identical to the local one."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def bed(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("bed")
    proc = subprocess.run([sys.executable, "-m", "tests.cluster_bed", str(out)],
                          capture_output=True, text=True, timeout=600,
                          cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_actors_spread_over_both_worker_nodes_and_equal_the_local_run(bed):
    spread = bed["spread"]
    assert spread["ray_nodes"] == 2
    nodes = {a["node"] for a in spread["actor_nodes"].values()}
    assert len(nodes) == 2
    assert sorted(c for a in spread["actor_nodes"].values() for c in a["clients"]) == \
        [0, 1, 2, 3]
    assert spread["equal_to_local"]
    # a ring of 4 over 2 nodes: 4 of its 8 directed edges join the nodes, and every DSGD
    # message has the same size, so half the bytes cross
    assert spread["bytes_cross_node"] * 2 == spread["bytes_total"] > 0


@pytest.mark.slow
def test_pack_and_spread_lay_out_half_cpu_actors_and_strict_spread_refuses(bed):
    assert bed["pack_half_cpu"] == 1 and bed["spread_half_cpu"] == 2
    # each bundle also reserves the memory the plan gives its actor, out of each node's
    assert re.fullmatch(
        r"ray\.placement: the cluster cannot place 4 actors of \{'CPU': 0\.5, 'memory': "
        r"'\d+ MB'\} strict_spread over its nodes \(1 CPU \d+ MB, 1 CPU \d+ MB\): use fewer "
        r"or smaller actors \(ray\.clients_per_actor, ray\.num_cpus_per_actor\), another "
        r"ray\.placement, or more nodes", bed["strict_spread_3_of_2"])


@pytest.mark.slow
def test_a_node_without_the_memory_for_its_actor_is_refused_naming_it(bed):
    small = bed["small_node"]
    assert small["said"].startswith(f"ray.clients_per_actor: node 127.0.0.1 "
                                    f"({small['id'][:8]}) would need ~")
    assert " for its 1 actor(s) but has 500 MB (memory plan: 1 actor(s)" in small["said"]
    # 4 clients over 3 slots were 2, 1 and 1: two actors of 2 fit the two larger nodes
    assert re.search(r"; set ray\.clients_per_actor=2 \(2 actor\(s\): 1 on node 127\.0\.0\.1 "
                     r"\(\w{8}\), 1 on node 127\.0\.0\.1 \(\w{8}\)\)$", small["said"])
    assert small["nothing_left"]


@pytest.mark.slow
def test_shared_frozen_weights_are_one_copy_per_node(bed):
    """4 LoRA actors, 2 on each worker, share one frozen base: each worker's object store
    holds exactly one copy, which its two actors map."""
    frozen = bed["frozen"]
    assert frozen["actor_nodes"] == sorted(frozen["workers"] * 2)
    assert frozen["copies_on_workers"] == frozen["workers"]


@pytest.mark.slow
def test_a_worker_node_removed_mid_run_is_survived_under_each_policy(bed):
    """Removed once round 6 is logged (checkpoints every 4 rounds)."""
    churn, restart = bed["lose_churn"], bed["lose_restart"]
    # churn: the actor of the removed node had clients 0 and 1; from the round it was
    # lost in, 2 of the 4 clients are left, and no restart
    assert churn["lost_clients"] == [[0, 1]] or churn["lost_clients"] == [[2, 3]]
    lost_at = next(k for k, n in enumerate(churn["live_clients"]) if n is not None)
    assert lost_at >= 6 and churn["live_clients"][lost_at:] == [2] * (12 - lost_at)
    assert churn["restarts"] == 0 and not churn["equal_to_local"]
    assert churn["actor_losses"] == [{"round": lost_at, "clients": churn["lost_clients"][0],
                                      "node": churn["removed"][0], "then": "crash"}]
    # restart: back to the checkpoint of round 4 on the node left, the local run exactly
    assert restart["restarts"] == 1 and restart["equal_to_local"]
    (loss,) = restart["actor_losses"]
    assert loss["then"] == "restart" and loss["node"] == restart["removed"][0]
    assert loss["round"] >= 6
