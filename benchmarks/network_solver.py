"""Cost of the max-min fair flow solver against the round it times.

128 digits clients on a random 10-regular graph run DSGD (the quickstart's MLP, 5 local
steps, batch 8): every gossip phase is 1 280 flows. The solver times that phase's traffic
under four network/compute settings, from the cheapest (equal links, no node caps, no
compute: every flow finishes at once) to the most expensive (per-link capacity draws, node
caps and lognormal compute speeds: every flow starts and ends at its own time, one
progressive filling per event). Each is printed as milliseconds per phase and as a
fraction of one measured digits round (both medians of --repeats, measured side by side).

    python benchmarks/network_solver.py [--clients 128] [--degree 10] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np


def main() -> None:
    from decent.backends.local import local_engine
    from decent.engine.config import from_dict
    from decent.network.timing import Network, NetworkConfig, Spread

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=128)
    p.add_argument("--degree", type=int, default=10)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    n = args.clients
    cfg = from_dict({
        "name": "bench", "rounds": 1, "topology": {"name": "random_regular", "n": n,
                                                   "degree": args.degree},
        "strategy": {"name": "dsgd", "local_steps": 5, "batch_size": 8, "lr": 0.1},
        "task": {"name": "digits"}, "model": {"name": "mlp", "hidden": [64]},
        "tracking": {"out_dir": tempfile.mkdtemp(), "progress": False,
                     "wandb": {"mode": "disabled"}},
    })
    backend = local_engine(cfg)
    round_s, edges = [], {}
    for r in range(args.repeats + 1):
        t0 = time.perf_counter()
        _, traffic = backend.run_round(r)
        if r > 0:  # round 0 warms up
            round_s.append(time.perf_counter() - t0)
        edges = traffic.edge_bytes
    round_med = statistics.median(round_s)

    rng = np.random.default_rng(0)
    speeds = np.exp(rng.normal(0.0, 0.5, n))
    compute = {i: 0.05 / float(speeds[i]) for i in range(n)}
    spread = Spread(dist="uniform", low=0.5, high=2.0)
    settings = [
        ("equal links, no node caps", NetworkConfig(), None),
        ("equal links, 100 Mbps node caps", NetworkConfig(node_mbps=100), None),
        ("link draws + node caps", NetworkConfig(node_mbps=100, link_spread=spread), None),
        ("link draws + node caps + compute", NetworkConfig(node_mbps=100, link_spread=spread),
         compute),
    ]
    print(f"DSGD on random_regular n={n}, degree {args.degree}: {len(edges)} flows per gossip "
          f"phase; digits round {round_med * 1e3:.0f} ms (median of {args.repeats})")
    print(f"{'setting':<34} {'solver ms':>10} {'of a round':>11}")
    for label, net_cfg, comp in settings:
        net = Network(net_cfg, n, 0)
        net.phase_time(edges, comp)  # draw the links once, as a run does
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            net.phase_time(edges, comp)
            times.append(time.perf_counter() - t0)
        solver = statistics.median(times)
        print(f"{label:<34} {solver * 1e3:>10.2f} {solver / round_med:>10.1%}")


if __name__ == "__main__":
    main()
