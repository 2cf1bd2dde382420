"""The layout a Ray run starts, planned without Ray from faked cluster facts: actors that
share a GPU never get NCCL (a mixed or fractional layout uses the object store, and so
does one where Ray's assigned ids disagree with the plan), a restart over fewer nodes
lays out fewer actors with more clients each, ``ray.placement`` decides each actor's node,
a node without the memory for its actors is one line, a sweep's trials are sized by the
same planner, and a half-started executor closes without raising."""

from __future__ import annotations

import pytest

from decent.backends.ray.executor import RayActors
from decent.backends.ray.layout import (
    ClusterFacts,
    NodeFacts,
    as_one_node,
    plan_layout,
    trial_layout,
)
from decent.backends.ray.memory_plan import Footprint
from decent.core.errors import ConfigError
from decent.engine.config import from_dict
from tests.helpers import tiny


def cfg_for(tmp_path, n=8, **ray):
    return from_dict(tiny(tmp_path, backend="ray", topology={"name": "ring", "n": n},
                          ray=ray))


def node(name: str, cpus=4.0, gpus=0.0, memory_mb=None, driver=False) -> NodeFacts:
    return NodeFacts(f"{name}{'0' * 20}", f"10.0.0.{len(name)}", cpus, gpus, memory_mb,
                     driver)


def test_actors_sharing_a_gpu_never_get_nccl(tmp_path):
    """Four quarter-GPU actors on one GPU: NCCL cannot hold two ranks of one device, so
    payloads go through the object store, said in one line."""
    cfg = cfg_for(tmp_path, num_gpus_per_actor=0.25, clients_per_actor=2)
    layout = plan_layout(cfg, ClusterFacts((node("a", gpus=1.0),)))
    assert layout.gpus == [0, 0, 0, 0]
    assert layout.transport is None and layout.pair_transport(0, 1) == "object store"
    assert "NCCL cannot hold two ranks of one device" in layout.note
    assert layout.lines()[1] == layout.note


def test_a_mixed_layout_packs_as_ray_does_and_uses_the_object_store(tmp_path):
    cfg = cfg_for(tmp_path, num_gpus_per_actor=0.5, clients_per_actor=2)
    layout = plan_layout(cfg, ClusterFacts((node("a", gpus=2.0),)))
    assert layout.gpus == [0, 0, 1, 1]  # a GPU filled before the next
    assert layout.transport is None


@pytest.mark.parametrize(("nodes", "per_actor"), [
    ((node("a", gpus=2.0),), 1.0),  # two whole GPUs of one node
    ((node("a", gpus=1.0), node("b", gpus=1.0)), 1.0),  # one GPU on each of two nodes
])
def test_actors_on_different_gpus_get_nccl(tmp_path, nodes, per_actor):
    cfg = cfg_for(tmp_path, num_gpus_per_actor=per_actor, clients_per_actor=4)
    layout = plan_layout(cfg, ClusterFacts(nodes))
    assert len({(n, g) for n, g in zip(layout.nodes, layout.gpus, strict=True)}) == 2
    assert layout.transport == "nccl" and layout.pair_transport(0, 1) == "rdt nccl"
    assert layout.note is None


@pytest.mark.parametrize(("gpus", "per_actor", "wanted"), [
    (1.0, 0.25, "auto"),  # one quarter-GPU actor: auto asks for NCCL
    (0.0, 0.0, "rdt"),  # one CPU actor, RDT (Gloo) asked for by name
])
def test_one_actor_moves_no_payload_between_actors_so_no_rdt_group(tmp_path, gpus,
                                                                   per_actor, wanted):
    """Every client in one actor: nothing crosses between actors, so no collective group
    of one rank; said in one line."""
    cfg = cfg_for(tmp_path, n=4, num_gpus_per_actor=per_actor, clients_per_actor=4,
                  payload_transport=wanted)
    layout = plan_layout(cfg, ClusterFacts((node("a", gpus=gpus),)))
    assert len(layout.nodes) == 1 and layout.transport is None
    assert layout.note == ("payloads: the object store, not RDT over "
                           f"{'NCCL' if gpus else 'Gloo'}: one actor holds every client, so "
                           "no payload moves between actors")


def test_ray_assigned_ids_that_share_a_gpu_fall_back_to_the_object_store(capsys):
    planned = "nccl"
    assert RayActors.confirm_transport(planned, [("n1", [0]), ("n2", [0])]) == "nccl"
    assert RayActors.confirm_transport(planned, [("n1", [0]), ("n1", [0])]) is None
    assert "Ray assigned one GPU to several actors" in capsys.readouterr().out
    assert RayActors.confirm_transport(None, [("n1", [0]), ("n1", [0])]) is None


def test_a_restart_over_fewer_nodes_lays_out_fewer_actors(tmp_path):
    """Two one-CPU workers host two actors; with one gone, the plan over the nodes alive
    then has one actor with every client."""
    cfg = cfg_for(tmp_path, n=4)
    head = node("head", cpus=0.0, driver=True)
    both = plan_layout(cfg, ClusterFacts((head, node("w1", 1.0), node("w2", 1.0))))
    assert both.groups == [[0, 1], [2, 3]] and len(set(both.nodes)) == 2
    assert head.id not in both.nodes
    one = plan_layout(cfg, ClusterFacts((head, node("w1", 1.0))))
    assert one.groups == [[0, 1, 2, 3]] and one.nodes == [node("w1").id]


def test_placement_decides_each_actors_node(tmp_path):
    nodes = (node("w1", 1.0), node("w2", 1.0))
    pack = plan_layout(cfg_for(tmp_path, n=4, placement="pack", num_cpus_per_actor=0.5,
                               clients_per_actor=2), ClusterFacts(nodes))
    assert pack.nodes == [nodes[0].id] * 2  # half-CPU actors: both fit the first node
    spread = plan_layout(cfg_for(tmp_path, n=4, num_cpus_per_actor=0.5,
                                 clients_per_actor=2), ClusterFacts(nodes))
    assert sorted(spread.nodes) == sorted(n.id for n in nodes)
    with pytest.raises(ConfigError, match=r"ray\.placement: the cluster cannot place 4 "
                       r"actors of \{'CPU': 1\.0\} strict_spread over its nodes \(1 CPU, "
                       r"1 CPU\)"):
        plan_layout(cfg_for(tmp_path, n=4, placement="strict_spread", clients_per_actor=1),
                    ClusterFacts(nodes))


FOOT = Footprint(model_mb=100.0, frozen_mb=0.0, per_client_mb=50.0, data_mb=10.0)


def test_the_memory_plan_lays_actors_where_they_fit_or_refuses_in_one_line(tmp_path):
    cfg = cfg_for(tmp_path, n=4)
    big, small = node("big", 1.0, memory_mb=20_000.0), node("small", 1.0, memory_mb=500.0)
    with pytest.raises(ConfigError) as refused:
        plan_layout(cfg, ClusterFacts((big, small)), FOOT)
    said = str(refused.value)
    assert said.startswith(f"ray.clients_per_actor: {small.name} would need ~")
    assert "but has 500 MB" in said and "\n" not in said
    fits = plan_layout(cfg, ClusterFacts((big, node("big2", 1.0, memory_mb=20_000.0))),
                       FOOT)
    assert fits.groups == [[0, 1], [2, 3]] and set(fits.node_memory) == set(fits.nodes)
    assert all(line for line in fits.lines())


def test_a_sweep_sizes_its_trials_with_the_planner(tmp_path):
    cfg = cfg_for(tmp_path, n=30)
    sized, layout = trial_layout(cfg, as_one_node({"CPU": 8.0}), concurrent=2)
    assert sized.ray.actor_slots == 4 and cfg.ray.actor_slots is None
    assert [len(g) for g in layout.groups] == [8, 8, 7, 7] and layout.nodes == [None] * 4


def test_a_half_started_executor_closes_without_raising():
    """Actors marked dead that were never started (a start that failed after the plan,
    a restart whose layout shrank) and a second close: nothing raises."""
    executor = RayActors.__new__(RayActors)
    executor.close()  # nothing set at all
    executor.actors, executor.dead, executor.started_ray = [], {0, 3}, False
    executor.close()
    executor.close()
    assert executor.actors == []


def test_with_no_node_to_host_an_actor_yet_ray_places_them(tmp_path):
    """A head without CPUs whose autoscaler adds workers on demand: the actors are
    started where Ray puts them, said in one line, never refused."""
    cfg = cfg_for(tmp_path, n=16, clients_per_actor=8, num_cpus_per_actor=1.0)
    layout = plan_layout(cfg, ClusterFacts((node("head", cpus=0.0, driver=True),)), FOOT)
    assert layout.groups == [list(range(8)), list(range(8, 16))]
    assert layout.nodes == [None, None] and layout.memory is not None
    assert "Ray places them as nodes join" in layout.note


def test_a_gpu_that_cannot_hold_its_actors_is_refused_before_they_start(tmp_path):
    """Four quarter-GPU actors of a model whose clients need ~1 GB each on a GPU of 2 GB:
    one line naming the field to change; the same actors on an 80 GB GPU are planned, the
    per-GPU line printed."""
    big = Footprint(model_mb=500.0, frozen_mb=0.0, per_client_mb=1000.0, data_mb=10.0)
    cfg = cfg_for(tmp_path, n=8, num_gpus_per_actor=0.25, clients_per_actor=2)
    gpu = (node("a", gpus=1.0, memory_mb=50_000.0),)
    with pytest.raises(ConfigError) as refused:
        plan_layout(cfg, ClusterFacts(gpu, gpu_mb=2_000.0), big)
    assert str(refused.value).startswith("ray.") and "\n" not in str(refused.value)
    fits = plan_layout(cfg, ClusterFacts(gpu, gpu_mb=80_000.0), big)
    assert fits.gpu_memory is not None and fits.gpu_memory.fits
    assert fits.lines()[-1] == fits.gpu_memory.describe()
