"""Round time of large payloads through the object store against Ray Direct Transport.

DSGD on a ring of 4 clients on 2 actors (clients 0–1 and 2–3): each round every client
sends its model to both neighbours, so 4 of the 8 messages cross between actors and 4 stay
on their actor. The model is the digits MLP with one hidden layer sized so that a model is
``--mb`` MB (64·h + h + 10·h + 10 values); one local step of batch 8 keeps compute small
beside the transfers.

- ``object store``: the sender's actor puts each payload as a numpy array (zero-copy on
  one node), the receiver's actor gets it and copies it into a writable tensor;
- ``rdt``: the sender keeps its tensors; the receiver's actor gets the ones it needs from
  each other actor over Ray Direct Transport (Gloo on CPU actors, NCCL on GPU actors with
  ``--gpus-per-actor``), and a payload for a client on the sender's own actor is handed
  over in the process, as the local backend does.

One embedded Ray session runs every configuration; each repeat builds both backends afresh
and times rounds 1.. (round 0 is warm-up) alternately, so a burst of load from elsewhere
skews one repeat. Printed: median seconds per round and the ratio rdt ÷ object store.

    python benchmarks/payload_transport.py [--mb 1 10 40] [--rounds 6] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

TRANSPORTS = {"object store": "object_store", "rdt": "rdt"}


def hidden_for(mb: float) -> int:
    """The hidden width that makes the digits MLP ``mb`` MB in float32."""
    return max(1, round((mb * 2**20 / 4 - 10) / 75))


def round_times(mb: float, transport: str, rounds: int, gpus: float, out: str) -> list[float]:
    from decent.engine.config import from_dict
    from decent.engine.plan import build_plan
    from decent.run.runner import make_engine

    cfg = from_dict({
        "name": "bench", "rounds": rounds, "backend": "ray",
        "topology": {"name": "ring", "n": 4},
        "model": {"name": "mlp", "hidden": [hidden_for(mb)]},
        "strategy": {"name": "dsgd", "local_steps": 1, "batch_size": 8, "lr": 0.01},
        "device": "auto",  # cuda on GPU actors
        "eval": {"every": 0, "per_client": False},
        "ray": {"clients_per_actor": 2, "payload_transport": transport,
                "num_gpus_per_actor": gpus, "memory_plan": False},
        "tracking": {"out_dir": out, "progress": False, "wandb": {"mode": "disabled"}},
    })
    backend = make_engine(cfg, build_plan(cfg))
    try:
        path = backend.layout["ray_payload_path"]
        assert path.startswith("rdt") == (transport == "rdt"), path
        times = []
        for r in range(rounds):
            started = time.perf_counter()
            backend.run_round(r)
            times.append(time.perf_counter() - started)
    finally:
        backend.close()
    return times[1:]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=float, nargs="+", default=[1, 10, 40])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--gpus-per-actor", type=float, default=0.0)
    args = p.parse_args()

    import ray

    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False,
             object_store_memory=2 * 2**30)
    got: dict[tuple[float, str], list[float]] = {}
    ratios: dict[float, list[float]] = {}
    with tempfile.TemporaryDirectory() as out:
        for _ in range(args.repeats):
            for mb in args.mb:
                medians = {}
                for name, transport in TRANSPORTS.items():
                    times = round_times(mb, transport, args.rounds, args.gpus_per_actor, out)
                    got.setdefault((mb, name), []).extend(times)
                    medians[name] = statistics.median(times)
                ratios.setdefault(mb, []).append(medians["rdt"] / medians["object store"])
    ray.shutdown()
    device = "GPU" if args.gpus_per_actor else "CPU"
    print(f"DSGD, ring of 4 on 2 {device} actors, 8 messages a round (4 between actors)")
    print(f"{'model MB':>8} {'object store s/round':>21} {'rdt s/round':>12} "
          f"{'rdt ÷ store':>12}")
    for mb in args.mb:
        store = statistics.median(got[(mb, "object store")])
        rdt = statistics.median(got[(mb, "rdt")])
        print(f"{mb:>8g} {store:>21.4f} {rdt:>12.4f} {statistics.median(ratios[mb]):>12.2f}")


if __name__ == "__main__":
    main()
