"""A multi-node Ray cluster on one machine, for tests/test_multinode.py: a head without
CPUs and two worker nodes of one CPU each, each node its own raylet and object store
(``ray.cluster_utils.Cluster``), and runs joined to it by address, as under ``ray job
submit``. It runs in a process of its own (a process joins one Ray, and the suite's other
tests share an embedded one), prints one JSON object of findings and shuts down what it
started.

    python -m tests.cluster_bed OUT_DIR
"""

from __future__ import annotations

import glob
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

for key, value in {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled",
                   "RAY_USAGE_STATS_ENABLED": "0"}.items():
    os.environ[key] = value
os.environ.pop("RAY_ADDRESS", None)


def steady(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]


def config(out: Path, name: str, **sections: Any) -> dict[str, Any]:
    from tests.helpers import tiny

    return tiny(out / name, **{"rounds": 12, "topology": {"name": "ring", "n": 4},
                               "checkpoint": {"every": 4},
                               "eval": {"every": 4, "per_client": False}, **sections})


def frozen_copies(out: Path) -> dict[str, Any]:
    """A LoRA language model's frozen base shared by 4 actors, 2 on each worker: which
    nodes hold a copy of it in their object store while the actors run (Ray copies an
    object to a node on its first get there; the actors of a node map that copy)."""
    import ray
    from ray.experimental import get_object_locations

    from decent.engine.config import from_dict
    from decent.run.runner import check, make_engine

    lora = {"enabled": True, "r": 4, "alpha": 8, "dropout": 0.0,
            "target_modules": ["q_proj", "v_proj"]}
    cfg = from_dict(config(out, "frozen", rounds=1, backend="ray",
                           strategy={"name": "dsgd", "local_steps": 1, "batch_size": 4,
                                     "lr": 0.05},
                           task={"name": "lm", "corpus": "shakespeare", "seq_len": 32,
                                 "max_tokens": 20_000, "max_eval_sequences": 8},
                           model={"name": "causal_lm", "path": "tiny-llama", "lora": lora},
                           ray={"reuse_actors": False, "clients_per_actor": 1,
                                "num_cpus_per_actor": 0.5}))
    engine = make_engine(cfg, check(cfg))
    try:
        engine.run_round(0)
        ref = engine.executor.frozen
        actor_nodes = sorted(a["node"] for a in engine.layout["ray_actor_nodes"].values())
        held = get_object_locations([ref])[ref]["node_ids"]
        workers = {n["NodeID"] for n in ray.nodes() if n["Alive"]
                   and n["Resources"].get("CPU", 0) > 0}
        return {"actor_nodes": actor_nodes, "copies_on_workers": sorted(
            n for n in held if n in workers), "workers": sorted(workers)}
    finally:
        engine.close()


def main(out: Path) -> None:
    import ray
    from ray.cluster_utils import Cluster

    from decent.core.errors import ConfigError
    from decent.engine.config import from_dict
    from decent.run.runner import run

    node = {"num_cpus": 1, "object_store_memory": 100 * 2**20}
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "object_store_memory": 100 * 2**20, "include_dashboard": False})
    workers = [cluster.add_node(**node) for _ in range(2)]
    ray.init(address=cluster.address)
    found: dict[str, Any] = {}
    try:
        local = run(from_dict(config(out, "local")))

        def on_ray(name: str, **ray_cfg: Any) -> Any:
            return from_dict(config(out, name, backend="ray",
                                    ray={"reuse_actors": False, **ray_cfg}))

        spread = run(on_ray("spread"))
        found["spread"] = {"ray_nodes": spread.summary["ray_nodes"],
                           "actor_nodes": spread.summary["ray_actor_nodes"],
                           "equal_to_local": steady(spread.rows) == steady(local.rows),
                           "bytes_total": spread.summary["bytes_total"],
                           "bytes_cross_node": spread.summary["bytes_cross_node"]}
        for how in ("pack", "spread"):
            result = run(on_ray(how + "-half", placement=how, num_cpus_per_actor=0.5,
                                clients_per_actor=2))
            found[how + "_half_cpu"] = result.summary["ray_nodes"]
        try:
            run(on_ray("strict", placement="strict_spread", clients_per_actor=1))
        except ConfigError as exc:
            found["strict_spread_3_of_2"] = str(exc)
        # a third worker with 500 MB of memory: a bundle (~330 MB) fits it, but its
        # daemons and actor do not — refused naming it, before any actor starts
        small = cluster.add_node(num_cpus=1, object_store_memory=100 * 2**20,
                                 memory=500 * 2**20)
        try:
            run(on_ray("small-node"))
        except ConfigError as exc:
            found["small_node"] = {"said": str(exc), "id": small.node_id,
                                   "nothing_left": not glob.glob(f"{out}/small-node/runs/*")}
        cluster.remove_node(small)
        found["frozen"] = frozen_copies(out)
        for policy in ("churn", "restart"):
            runs = out / f"lose-{policy}"
            removed: list[str] = []

            def remove_at_round_6(runs: Path = runs, removed: list[str] = removed) -> None:
                while True:
                    rows = glob.glob(f"{runs}/runs/.*.partial/metrics.jsonl")
                    if rows and len(Path(rows[0]).read_text().splitlines()) >= 6:
                        break
                    time.sleep(0.02)
                victim = workers.pop(0)
                removed.append(victim.node_id)
                cluster.remove_node(victim)

            threading.Thread(target=remove_at_round_6, daemon=True).start()
            result = run(from_dict(config(out, f"lose-{policy}", backend="ray", ray={
                "reuse_actors": False, "on_actor_death": policy})))
            lost = [a["clients"] for a in result.summary["ray_actor_nodes"].values()
                    if a["node"] in removed]
            found[f"lose_{policy}"] = {
                "restarts": result.summary["restarts"],
                "live_clients": [r.get("live_clients") for r in result.rows],
                "equal_to_local": steady(result.rows) == steady(local.rows),
                "lost_clients": lost, "removed": removed,
                "actor_losses": result.summary.get("actor_losses")}
            workers.append(cluster.add_node(**node))  # the next run has two workers again
    finally:
        ray.shutdown()
        cluster.shutdown()
    print(json.dumps(found))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
