"""Tensor operations dispatched by one batched iteration at 16 and at 128 clients, all in
one chunk: the MLP quick start, LoRA-DSGD and SeedFlood SubCGE on a tiny Llama
(decent/tools/op_counts.py). A hot path that is whole-tensor work over the client
dimension dispatches the same number of kernels at both counts; each client's draws
from its own generator are counted apart.

    python benchmarks/op_count.py [--small]    # --small: 4 against 16 clients
"""

from __future__ import annotations

import argparse


def main() -> None:
    import torch

    from decent.tools import op_counts

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--small", action="store_true", help="4 against 16 clients")
    args = p.parse_args()
    torch.set_num_threads(1)
    sizes = (4, 16) if args.small else (16, 128)
    rows = [op_counts.count(name, n) for name in op_counts.workloads(sizes[0])
            for n in sizes]
    print(op_counts.table(rows))
    for r in rows:
        print(f"{r.workload}, {r.n}: " + ", ".join(f"{k} {v}" for k, v in r.top))


if __name__ == "__main__":
    main()
