"""A node lost mid-run on a 3-node Ray cluster (``ray.cluster_utils.Cluster`` on one
machine: each node its own raylet and object store), under each ``ray.on_actor_death``.

The run joins the cluster by address (as under ``ray job submit``), 6 clients in 3 actors
of half a CPU each on 3 one-CPU nodes; once round 25 is logged a worker node is removed,
and with it whatever actor Ray placed there. ``restart`` goes back to the checkpoint of
round 20 on new actors and must end as the local run, bit for bit; ``churn`` goes on
without the lost clients. Prints what happened.

    python benchmarks/lost_node.py
"""

from __future__ import annotations

import glob
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

LOCAL_RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled",
                 "RAY_USAGE_STATS_ENABLED": "0"}


def config(out: Path, **sections: Any) -> dict[str, Any]:
    return {"name": "lost-node", "seed": 0, "rounds": 60,
            "topology": {"name": "ring", "n": 6},
            "strategy": {"name": "dsgd", "local_steps": 2, "batch_size": 8, "lr": 0.1},
            "task": {"name": "digits"}, "model": {"name": "mlp", "hidden": [16]},
            "eval": {"every": 5, "per_client": False}, "checkpoint": {"every": 10},
            "tracking": {"out_dir": str(out), "progress": False,
                         "wandb": {"mode": "disabled"}}, **sections}


def steady(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]


def lose_a_node(policy: str, out: Path) -> str:
    import ray
    from ray.cluster_utils import Cluster

    from decent.engine.config import from_dict
    from decent.run.runner import run

    node = {"num_cpus": 1, "object_store_memory": 150 * 2**20}
    cluster = Cluster(initialize_head=True,
                      head_node_args={**node, "include_dashboard": False})
    workers = [cluster.add_node(**node) for _ in range(2)]
    ray.init(address=cluster.address)
    runs = out / policy
    cfg = from_dict(config(runs, backend="ray", ray={
        "clients_per_actor": 2, "num_cpus_per_actor": 0.5, "on_actor_death": policy,
        "reuse_actors": False, "memory_plan": False}))

    def remove_at_round_25() -> None:
        while True:
            found = glob.glob(f"{runs}/.*.partial/metrics.jsonl")
            if found and len(Path(found[0]).read_text().splitlines()) >= 25:
                break
            time.sleep(0.05)
        cluster.remove_node(workers[0])

    threading.Thread(target=remove_at_round_25, daemon=True).start()
    try:
        t0 = time.perf_counter()
        result = run(cfg)
        wall = time.perf_counter() - t0
    finally:
        ray.shutdown()
        cluster.shutdown()
    reference = run(from_dict(config(out / "local")))
    same = steady(result.rows) == steady(reference.rows)
    return (f"{policy:<8} restarts {result.summary['restarts']}  clients at the end "
            f"{result.summary.get('live_clients', cfg.n)} of {cfg.n}  rows ≡ local run: "
            f"{same}  wall {wall:.1f} s")


def main() -> None:
    for key, value in LOCAL_RAY_ENV.items():
        os.environ.setdefault(key, value)
    with tempfile.TemporaryDirectory() as out:
        lines = [lose_a_node(policy, Path(out)) for policy in ("restart", "churn")]
    print("a worker node of 3 removed after round 25 (checkpoints every 10 rounds)")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
