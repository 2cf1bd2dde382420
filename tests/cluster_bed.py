"""A multi-node Ray cluster on one machine, for tests/test_multinode.py: a head without
CPUs and two worker nodes of one CPU each, each node its own raylet and object store
(``ray.cluster_utils.Cluster``), and runs joined to it by address, as under ``ray job
submit``. It runs in a process of its own (a process joins one Ray, and the suite's other
tests share an embedded one), as a background job of `make test`'s cluster step
(tests/background.py): its findings go to ``OUT_DIR/result.json``, and it shuts down what
it started.

    python -m tests.cluster_bed OUT_DIR
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tests.background import run_main

ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled",
       "RAY_USAGE_STATS_ENABLED": "0"}


def steady(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "round_wall_s"} for r in rows]


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


# a node is removed once this many rounds are logged, in runs of LOSS_ROUNDS rounds with
# a checkpoint every 2
REMOVE_AFTER, LOSS_ROUNDS = 4, 8


def method_run(out: Path, method: str, name: str) -> dict[str, Any]:
    """``method`` as the suite runs it (a star for FedAvg) on 4 clients."""
    from tests.helpers import method_config

    return method_config(out / name, method, 4, rounds=LOSS_ROUNDS, checkpoint={"every": 2},
                         eval={"every": 2, "per_client": False})


def record_layouts() -> list[dict[str, Any]]:
    """Every Ray run's layout (actor → node and clients) as its actors start, newest last."""
    from decent.backends.ray import executor

    layouts: list[dict[str, Any]] = []
    start = executor.RayActors.__init__

    def recording(self: Any, *args: Any, **kw: Any) -> None:
        start(self, *args, **kw)
        layouts.append(self.layout)

    executor.RayActors.__init__ = recording  # type: ignore[method-assign]
    return layouts


def lose_a_node(cluster: Any, workers: list[Any], node: dict[str, Any],
                layouts: list[dict[str, Any]], base: dict[str, Any], reference: Any,
                where: Path, policy: str) -> dict[str, Any]:
    """``base`` on Ray under ``ray.on_actor_death: policy``, the worker node hosting the
    last client removed once REMOVE_AFTER rounds are logged (never client 0's node: a
    star's server), and a fresh worker added after: what the run did, against
    ``reference`` (its local run)."""
    from decent.core.errors import ConfigError
    from decent.engine.config import from_dict
    from decent.run.runner import run

    removed: list[str] = []
    n = base["topology"]["n"]

    def remove_mid_run() -> None:
        while True:
            rows = glob.glob(f"{where}/runs/.*.partial/metrics.jsonl")
            if rows and len(Path(rows[0]).read_text().splitlines()) >= REMOVE_AFTER:
                break
            time.sleep(0.02)
        host = next(a["node"] for a in layouts[-1]["ray_actor_nodes"].values()
                    if n - 1 in a["clients"])
        victim = next(w for w in workers if w.node_id == host)
        workers.remove(victim)
        removed.append(victim.node_id)
        cluster.remove_node(victim)

    threading.Thread(target=remove_mid_run, daemon=True).start()
    cfg = from_dict({**base, "tracking": {**base["tracking"], "out_dir": str(where / "runs")},
                     "backend": "ray", "ray": {"reuse_actors": False, "memory_plan": False,
                                               "on_actor_death": policy}})
    try:
        result = run(cfg)
    except ConfigError as exc:  # a method that cannot lose clients: one line
        workers.append(cluster.add_node(**node))
        return {"said": str(exc), "removed": removed}
    workers.append(cluster.add_node(**node))  # the next run has two workers again
    lost = [a["clients"] for a in result.summary["ray_actor_nodes"].values()
            if a["node"] in removed]
    return {"restarts": result.summary["restarts"],
            "live_clients": [r.get("live_clients") for r in result.rows],
            "equal_to_local": reference is not None
            and steady(result.rows) == steady(reference.rows),
            "lost_clients": lost, "removed": removed,
            "actor_losses": result.summary.get("actor_losses")}


def lose_two_nodes(cluster: Any, workers: list[Any], node: dict[str, Any],
                   layouts: list[dict[str, Any]], out: Path, reference: Any
                   ) -> dict[str, Any]:
    """DSGD under ``restart`` on three one-CPU workers, with no node added back: the
    worker hosting the last client removed once REMOVE_AFTER rows are logged, and a
    second worker removed as soon as the restart starts planning (before its actors are
    placed). The run plans again over the nodes that answer, as often as it must, and
    ends as the local run."""
    from decent.backends.ray import spread
    from decent.engine.config import from_dict
    from decent.run.runner import run

    workers.append(cluster.add_node(**node))
    base = method_run(out, "dsgd", "two-local")  # ``reference`` is its local run
    planning = threading.Event()
    facts = spread.cluster_facts

    def noting(*args: Any, **kw: Any) -> Any:
        planning.set()
        return facts(*args, **kw)

    spread.cluster_facts = noting  # type: ignore[assignment]
    removed: list[str] = []
    n = base["topology"]["n"]

    def remove_two() -> None:
        while True:
            rows = glob.glob(f"{out}/two/runs/.*.partial/metrics.jsonl")
            if rows and len(Path(rows[0]).read_text().splitlines()) >= REMOVE_AFTER:
                break
            time.sleep(0.02)
        host = next(a["node"] for a in layouts[-1]["ray_actor_nodes"].values()
                    if n - 1 in a["clients"])
        planning.clear()
        victim = next(w for w in workers if w.node_id == host)
        workers.remove(victim)
        removed.append(victim.node_id)
        cluster.remove_node(victim)
        planning.wait()  # the restart is planning: the second goes now
        if len(workers) > 1:  # one worker stays
            victim = workers.pop(0)
            removed.append(victim.node_id)
            cluster.remove_node(victim)

    threading.Thread(target=remove_two, daemon=True).start()
    cfg = from_dict({**base, "tracking": {**base["tracking"], "out_dir": str(out / "two/runs")},
                     "backend": "ray", "ray": {"reuse_actors": False, "memory_plan": False,
                                               "on_actor_death": "restart"}})
    try:
        result = run(cfg)
    finally:
        spread.cluster_facts = facts  # type: ignore[assignment]
        while len(workers) < 2:  # the next run has two workers again
            workers.append(cluster.add_node(**node))
    return {"restarts": result.summary["restarts"], "removed": removed,
            "actors_after": result.summary["ray_actors"],
            "equal_to_local": steady(result.rows) == steady(reference.rows)}


def resumed_after_driver_kill(address: str, out: Path) -> dict[str, Any]:
    """``decent run`` attached to the cluster in a driver process of its own, SIGKILLed
    once 5 rounds are logged (checkpoints every 2), then ``resume``d from this process,
    also attached: the rows against the local run's."""
    import yaml

    from decent.engine.config import from_dict
    from decent.run.runner import resume, run

    base = method_run(out, "dsgd", "killed") | {"rounds": 16}
    reference = run(from_dict(base))
    raw = {**base, "tracking": {**base["tracking"], "out_dir": str(out / "killed-runs")},
           "backend": "ray", "ray": {"address": address, "reuse_actors": False,
                                     "memory_plan": False}}
    (out / "killed.yaml").write_text(yaml.safe_dump(raw))
    with (out / "killed.log").open("w") as log:
        driver = subprocess.Popen([sys.executable, "-m", "decent", "run",
                                   str(out / "killed.yaml")], stdout=log,
                                  stderr=subprocess.STDOUT)
    rows: list[str] = []
    while driver.poll() is None:
        rows = glob.glob(f"{out}/killed-runs/.*.partial/metrics.jsonl")
        if rows and len(Path(rows[0]).read_text().splitlines()) >= 5:
            driver.kill()
            break
        time.sleep(0.02)
    code = driver.wait()
    logged = len(Path(rows[0]).read_text().splitlines()) if rows else 0
    result = resume(Path(rows[0]).parent)
    return {"exit": code, "rows_when_killed": logged,
            "equal_to_local": steady(result.rows) == steady(reference.rows)}


def main(out: Path) -> dict[str, Any]:
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
        # half-CPU actors fit one node: packed there (the default run above spreads)
        result = run(on_ray("pack-half", placement="pack", num_cpus_per_actor=0.5,
                            clients_per_actor=2))
        found["pack_half_cpu"] = result.summary["ray_nodes"]
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
        layouts = record_layouts()
        # under restart a lost node takes the same path whatever the method (each one's
        # checkpoint and resume are tested bit for bit in tests/test_checkpoint.py): DSGD
        # and SeedFlood, which can survive a lost node no other way
        references: dict[str, Any] = {}
        for method, policies in (("dsgd", ("churn", "restart")), ("fedavg", ("churn",)),
                                 ("seedflood", ("churn", "restart")), ("combo", ("churn",))):
            base = method_run(out, method, f"local-{method}")
            reference = references[method] = run(from_dict(base)) \
                if "restart" in policies else None
            for policy in policies:
                key = f"lose_{method}_{policy}"
                found[key] = lose_a_node(cluster, workers, node, layouts, base, reference,
                                         out / key, policy)
        found["lose_two"] = lose_two_nodes(cluster, workers, node, layouts, out / "two",
                                           references["dsgd"])
        found["resumed"] = resumed_after_driver_kill(cluster.address, out)
    finally:
        ray.shutdown()
        cluster.shutdown()
    return found


if __name__ == "__main__":
    os.environ.update(ENV)
    os.environ.pop("RAY_ADDRESS", None)
    run_main(main)
