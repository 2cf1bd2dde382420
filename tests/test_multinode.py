"""Several nodes for real: a head without CPUs and two one-CPU worker nodes, each its own
raylet and object store (tests/cluster_bed.py, in a process of its own), and runs joined
to it by address. Actors spread over both nodes by default and are bit-identical to the
local backend; ``pack`` lays half-CPU actors out on one node;
``strict_spread`` beyond the nodes is one line, and so is a node without the memory for
its actor; a worker node removed mid-run is a crash of its clients under ``churn`` (DSGD,
FedAvg, Combo; one line for SeedFlood, which cannot lose clients) and, under ``restart``,
a run identical to the local one (DSGD, SeedFlood); a run whose driver was SIGKILLed
while attached resumes there as the local run."""

from __future__ import annotations

import re

import pytest

from tests import background
from tests.cluster_bed import LOSS_ROUNDS, REMOVE_AFTER


@pytest.fixture(scope="module")
def bed(tmp_path_factory) -> dict:
    return background.findings("cluster_bed", tmp_path_factory.mktemp("bed"))


@pytest.mark.slow
@pytest.mark.cluster
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
@pytest.mark.cluster
def test_pack_lays_half_cpu_actors_on_one_node_and_strict_spread_refuses(bed):
    assert bed["pack_half_cpu"] == 1
    # each bundle also reserves the memory the plan gives its actor, out of each node's
    assert re.fullmatch(
        r"ray\.placement: the cluster cannot place 4 actors of \{'CPU': 1\.0, 'memory': "
        r"'\d+ MB'\} strict_spread over its nodes \(1 CPU \d+ MB, 1 CPU \d+ MB\): use fewer "
        r"or smaller actors \(ray\.clients_per_actor, ray\.num_cpus_per_actor\), another "
        r"ray\.placement, or more nodes", bed["strict_spread_3_of_2"])


@pytest.mark.slow
@pytest.mark.cluster
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
@pytest.mark.cluster
def test_shared_frozen_weights_are_one_copy_per_node(bed):
    """4 LoRA actors, 2 on each worker, share one frozen base: each worker's object store
    holds exactly one copy, which its two actors map."""
    frozen = bed["frozen"]
    assert frozen["actor_nodes"] == sorted(frozen["workers"] * 2)
    assert frozen["copies_on_workers"] == frozen["workers"]


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.parametrize("method", ["dsgd", "fedavg", "combo"])
def test_a_node_removed_under_churn_crashes_its_clients_and_the_run_goes_on(bed, method):
    """8 rounds, checkpoints every 2, the node of clients 2 and 3 removed once 4 rounds are
    logged (for FedAvg, a star, never the server's): those two crash in the round it was
    lost in, and the run goes on with the other two, without a restart."""
    churn = bed[f"lose_{method}_churn"]
    assert churn["lost_clients"] == [[2, 3]] and churn["restarts"] == 0
    (loss,) = churn["actor_losses"]
    assert loss == {"round": loss["round"], "clients": [2, 3], "node": churn["removed"][0],
                    "then": "crash"}
    # removed once REMOVE_AFTER rows were logged: lost at the checkpoint taken after the
    # last of them at the earliest (the row then logged before the loss: None)
    r, live = loss["round"], churn["live_clients"]
    assert r >= REMOVE_AFTER - 1 and live[:r] == [None] * r and live[r] in (None, 2)
    assert live[r + 1:] == [2] * (LOSS_ROUNDS - r - 1)


@pytest.mark.slow
@pytest.mark.cluster
def test_seedflood_losing_a_node_under_churn_is_one_line(bed):
    said = bed["lose_seedflood_churn"]["said"]
    assert re.fullmatch(r"churn: client 2 crashes at round \d+, but strategy 'seedflood' "
                        r"cannot run with clients leaving: flooding relays every update "
                        r"over a fixed graph of known diameter, and applies each exactly "
                        r"once: a missing relay leaves replicas apart for good", said)


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.parametrize("method", ["dsgd", "seedflood"])
def test_a_node_removed_under_restart_ends_as_the_local_run(bed, method):
    """Back to the last checkpoint, on the node left: the local run, bit for bit."""
    restart = bed[f"lose_{method}_restart"]
    assert restart["restarts"] == 1 and restart["equal_to_local"]
    (loss,) = restart["actor_losses"]
    assert loss["then"] == "restart" and loss["node"] == restart["removed"][0]
    assert loss["round"] >= REMOVE_AFTER - 1 and loss["clients"] == [2, 3]


@pytest.mark.slow
@pytest.mark.cluster
def test_two_nodes_lost_one_while_the_restart_plans_ends_as_the_local_run(bed):
    """No node added back: the restart plans over the workers that answer (a second one
    removed while it plans), fewer actors with more clients, and the local run's rows."""
    two = bed["lose_two"]
    assert len(two["removed"]) == 2 and 1 <= two["restarts"] <= 3
    assert two["actors_after"] == 1 and two["equal_to_local"]


@pytest.mark.slow
@pytest.mark.cluster
def test_a_run_whose_driver_was_killed_resumes_on_the_cluster_as_the_local_run(bed):
    resumed = bed["resumed"]
    assert resumed["exit"] == -9 and 5 <= resumed["rows_when_killed"] < 16
    assert resumed["equal_to_local"]
