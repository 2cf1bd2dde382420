"""A node lost mid-run on a Ray cluster of a head without CPUs and two one-CPU worker
nodes (``ray.cluster_utils.Cluster`` on one machine: each node its own raylet and object
store), under each ``ray.on_actor_death``, --tries times each.

The run joins the cluster by address (as under ``ray job submit``), 6 clients over the
actors the default placement spreads over both workers; once round 25 is logged the worker
first added is removed (a preempted machine), and a fresh worker is added for the
next try. ``restart`` goes back to the checkpoint of round 20 on the node left and must
end as the local run, bit for bit; ``churn`` goes on without the lost clients. Prints one
line per try and the tally.

``--quickstart``: the quick start as a user runs it (``experiments/quickstart.yaml
backend=ray ray.on_actor_death=restart checkpoint.every=5``, 20 rounds), a worker removed
once 8 rounds are logged, under ``restart`` only.

    python benchmarks/lost_node.py [--tries 10] [--quickstart]
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


QUICKSTART = False  # --quickstart: the quick start's config, removed after round 8


def config(out: Path, **sections: Any) -> dict[str, Any]:
    if QUICKSTART:
        import yaml

        raw = yaml.safe_load((Path(__file__).resolve().parents[1] /
                              "experiments/quickstart.yaml").read_text())
        return {**raw, "rounds": 20, "checkpoint": {"every": 5},
                "tracking": {"out_dir": str(out), "progress": False,
                             "wandb": {"mode": "disabled"}}, **sections}
    return {"name": "lost-node", "seed": 0, "rounds": 60,
            "topology": {"name": "ring", "n": 6},
            "strategy": {"name": "dsgd", "local_steps": 2, "batch_size": 8, "lr": 0.1},
            "task": {"name": "digits"}, "model": {"name": "mlp", "hidden": [16]},
            "eval": {"every": 5, "per_client": False}, "checkpoint": {"every": 10},
            "tracking": {"out_dir": str(out), "progress": False,
                         "wandb": {"mode": "disabled"}}, **sections}


def steady(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "round_wall_s"} for r in rows]


def lose_a_node(policy: str, out: Path, cluster: Any, workers: list[Any],
                reference: list[dict[str, Any]], k: int) -> tuple[bool, str]:
    from decent.engine.config import from_dict
    from decent.run.runner import run

    runs = out / f"{policy}-{k}"
    cfg = from_dict(config(runs, backend="ray", ray={"on_actor_death": policy,
                                                     "reuse_actors": False}))
    removed: list[str] = []

    after = 8 if QUICKSTART else 25

    def remove_at_round_25() -> None:
        while True:
            found = glob.glob(f"{runs}/.*.partial/metrics.jsonl")
            if found and len(Path(found[0]).read_text().splitlines()) >= after:
                break
            time.sleep(0.02)
        # a worker: spread over the two, each hosts actors (the summary names it)
        victim = workers.pop(0)
        removed.append(victim.node_id)
        cluster.remove_node(victim)

    t0 = time.perf_counter()
    threading.Thread(target=remove_at_round_25, daemon=True).start()
    try:
        result = run(cfg)
    except Exception as exc:  # any error is a failed try, said in its line
        return False, f"{policy:<8} try {k}: {type(exc).__name__}: {exc}"
    finally:  # the next try has two workers again
        while len(workers) < 2:
            workers.append(cluster.add_node(num_cpus=1, object_store_memory=150 * 2**20))
    wall = time.perf_counter() - t0
    same = steady(result.rows) == steady(reference)
    live = result.summary.get("live_clients", cfg.n)
    ok = same if policy == "restart" else (live < cfg.n and bool(removed))
    losses = result.summary.get("actor_losses", [])
    return ok, (f"{policy:<8} try {k}: restarts {result.summary['restarts']}  clients at "
                f"the end {live} of {cfg.n}  rows ≡ local run: {same}  losses "
                f"{[(x['round'], x['clients'], x['then']) for x in losses]}  "
                f"wall {wall:.1f} s")


def main() -> None:
    import argparse

    import ray
    from ray.cluster_utils import Cluster

    from decent.engine.config import from_dict
    from decent.run.runner import run

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tries", type=int, default=10)
    p.add_argument("--quickstart", action="store_true")
    args = p.parse_args()
    global QUICKSTART
    QUICKSTART = args.quickstart
    policies = ("restart",) if QUICKSTART else ("restart", "churn")
    for key, value in LOCAL_RAY_ENV.items():
        os.environ.setdefault(key, value)
    lines, tally = [], {"restart": 0, "churn": 0}
    with tempfile.TemporaryDirectory() as out:
        reference = run(from_dict(config(Path(out) / "local"))).rows
        cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 0, "object_store_memory": 150 * 2**20, "include_dashboard": False})
        workers = [cluster.add_node(num_cpus=1, object_store_memory=150 * 2**20)
                   for _ in range(2)]
        ray.init(address=cluster.address)
        try:
            for k in range(args.tries):
                for policy in policies:
                    ok, line = lose_a_node(policy, Path(out), cluster, workers, reference, k)
                    tally[policy] += ok
                    lines.append(line)
                    print(line, flush=True)
        finally:
            ray.shutdown()
            cluster.shutdown()
    if QUICKSTART:
        print("the quick start, a worker node of 2 removed after round 8 (checkpoints every "
              f"5 rounds); as expected: restart {tally['restart']}/{args.tries}")
        return
    print("a worker node of 2 removed after round 25 (checkpoints every 10 rounds); "
          f"as expected: restart {tally['restart']}/{args.tries}, churn "
          f"{tally['churn']}/{args.tries}")


if __name__ == "__main__":
    main()
