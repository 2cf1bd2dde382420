"""The cluster as the layout planner sees it, and the actors started where it decided.

:func:`cluster_facts` reads the nodes Ray lists as alive and keeps those that answer now:
a node that stopped answering (removed, its raylet gone) stays in Ray's table as alive for
a while, and a restart that counted it would lay actors out on a machine that is gone. Each
actor then starts on the node its layout names (a hard node affinity), so the run is
exactly what was planned; a Tune trial's actors go in the trial's placement group."""

from __future__ import annotations

from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from decent.backends.ray.layout import ClusterFacts, Layout, NodeFacts
from decent.engine.config import RayConfig

# how long a node has to answer a task before the plan leaves it out (a live node runs
# one in well under a second; a worker process may take a few to start on a busy machine)
ANSWER_TIMEOUT_S = 20.0


@ray.remote(num_cpus=0, max_retries=0)
def _node_here() -> str:
    return ray.get_runtime_context().get_node_id()


def in_trial() -> bool:
    """Whether this driver runs inside a Tune trial's placement group."""
    return ray.get_runtime_context().get_placement_group_id() is not None


def answering(node_ids: list[str], timeout_s: float = ANSWER_TIMEOUT_S) -> set[str]:
    """The nodes of ``node_ids`` that run a task within ``timeout_s``."""
    refs = {_node_here.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
        node, soft=False)).remote(): node for node in node_ids}
    done, late = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s)
    for ref in late:
        ray.cancel(ref, force=True)
    out = set()
    for ref in done:
        try:
            ray.get(ref)
        except Exception:  # its node died while it ran: not answering
            continue
        out.add(refs[ref])
    return out


def gpu_size_mb(rc: RayConfig) -> float | None:
    """One GPU's memory as this driver sees it (GPU actors on a machine with one), else
    None: the per-GPU plan is then not checked (a CPU-only head of a GPU cluster)."""
    if rc.num_gpus_per_actor <= 0:
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(0).total_memory / 2**20


def cluster_facts(rc: RayConfig, host_mb: float | None, store_mb: float) -> ClusterFacts:
    """The nodes alive and answering now (one node is not asked: it runs this driver)."""
    here = ray.get_runtime_context().get_node_id()
    alive = [n for n in ray.nodes() if n["Alive"]]
    if len(alive) > 1:
        ok = answering([n["NodeID"] for n in alive])
        alive = [n for n in alive if n["NodeID"] in ok]
    nodes = tuple(NodeFacts(n["NodeID"], n["NodeManagerAddress"],
                            n["Resources"].get("CPU", 0.0), n["Resources"].get("GPU", 0.0),
                            rc.node_memory_mb or (n["Resources"].get("memory", 0.0) / 2**20
                                                  or None),
                            driver=n["NodeID"] == here) for n in alive)
    return ClusterFacts(nodes, in_trial=in_trial(), host_mb=host_mb, store_mb=store_mb,
                        gpu_mb=gpu_size_mb(rc))


def scheduling(layout: Layout, index: int) -> dict[str, Any]:
    """The ``.options`` that start actor ``index`` on its planned node."""
    node = layout.nodes[index]
    if node is None:
        return {}
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=False)}
