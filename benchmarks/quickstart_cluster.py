"""The quick start on a Ray cluster of several nodes against the local backend.

A cluster of a head without CPUs and two one-CPU worker nodes on this machine
(``ray.cluster_utils.Cluster``: each node its own raylet and object store), joined by
address; ``experiments/quickstart.yaml`` (DSGD, a ring of 16, 100 rounds) runs locally and
then with ``backend=ray ray.address=…`` at its defaults. Prints how many nodes hosted
actors, whether every metric row is bit-identical to the local run's, and the bytes that
crossed between nodes beside the simulated total (a ring of 16 in two contiguous halves:
4 of its 32 directed edges join the halves, so 1/8).

    python benchmarks/quickstart_cluster.py
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

for key, value in {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled",
                   "RAY_USAGE_STATS_ENABLED": "0"}.items():
    os.environ[key] = value
os.environ.pop("RAY_ADDRESS", None)

QUICKSTART = Path(__file__).resolve().parents[1] / "experiments" / "quickstart.yaml"


def main() -> None:
    import ray
    from ray.cluster_utils import Cluster

    from decent.engine.config import load_config
    from decent.run.runner import run

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "object_store_memory": 100 * 2**20, "include_dashboard": False})
    for _ in range(2):
        cluster.add_node(num_cpus=1, object_store_memory=100 * 2**20)
    try:
        ray.init(address=cluster.address)
        with tempfile.TemporaryDirectory() as out:
            common = [f"tracking.out_dir={out}", "tracking.progress=false"]
            local = run(load_config(str(QUICKSTART), common))
            on = run(load_config(str(QUICKSTART), [*common, "backend=ray",
                                                    f"ray.address={cluster.address}"]))

        def steady(rows: list[dict]) -> list[dict]:
            return [{k: v for k, v in r.items() if k != "round_wall_s"} for r in rows]

        s = on.summary
        print(json.dumps({"ray_nodes": s["ray_nodes"], "ray_actors": s["ray_actors"],
                          "rows": len(on.rows),
                          "rows_identical_to_local": steady(on.rows) == steady(local.rows),
                          "gmp_accuracy": s.get("gmp_accuracy"),
                          "bytes_total": s["bytes_total"],
                          "bytes_cross_node": s["bytes_cross_node"],
                          "cross_node_share": s["bytes_cross_node"] / s["bytes_total"]}))
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
