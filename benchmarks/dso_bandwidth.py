"""DSO's bandwidth ladder: bytes per step, FP32 → Top-1 % → + INT8 → + two tiers.

One step of DSO on ``tiny-llama`` (Shakespeare) with 40 workers around 4 aggregators
(`two_tier`, fanout 2, 3 gossip rounds), once per compression setting, every message
counted by the router; beside each measured figure its closed form:

* worker upload = 32 B commitment + 16 B nonce + the payload: 4·d dense, Σ_t 8·k_t for
  Top-k (int32 index + fp32 value), Σ_t (5·k_t + 4) for Top-k + INT8, k_t = ⌈keep·|t|⌉;
* all traffic of the step over all n = 44 nodes (uploads, gossip among the aggregators and
  each aggregator's set G down to its workers), per node;
* the reference: a ring all-reduce of the dense fp32 gradient, 2·(n − 1)/n · 4·d per node.

The ratios are to the FP32 all-reduce, as the report's table (40 → 0.52 → 0.12 → 0.024
GB/s, 1 667×, for a 7 B model).

    python benchmarks/dso_bandwidth.py [--keep 0.01]
"""

from __future__ import annotations

import argparse
import math
import tempfile

from decent.compression.topk import kept
from decent.models import params
from decent.platform.config import from_dict
from decent.platform.local_backend import LocalBackend

WORKERS, AGGREGATORS = 40, 4


def one_step(compression: str, keep: float) -> tuple[list, dict]:
    with tempfile.TemporaryDirectory() as out:
        cfg = from_dict({
            "name": "ladder", "rounds": 1,
            "topology": {"name": "two_tier", "n": WORKERS + AGGREGATORS,
                         "aggregators": AGGREGATORS},
            "strategy": {"name": "dso", "batch_size": 2, "compression": compression,
                         "keep": keep, "fanout": 2, "gossip_rounds": 3, "probe_batches": 1},
            "task": {"name": "lm", "corpus": "shakespeare", "seq_len": 32,
                     "max_tokens": 100_000, "max_eval_sequences": 2},
            "model": {"name": "causal_lm", "path": "tiny-llama"},
            "eval": {"every": 0, "per_client": False},
            "tracking": {"out_dir": out, "progress": False, "wandb": {"mode": "disabled"}},
        })
        backend = LocalBackend(cfg)
        sent = backend.record_messages()
        backend.run_round(0)
        sizes = {n: p.numel() for n, p in
                 params.trainable_params(backend.group.clients[0].model).items()}
        backend.close()
    return sent, sizes


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--keep", type=float, default=0.01)
    args = p.parse_args()
    n = WORKERS + AGGREGATORS
    rows = []
    for label, compression in (("FP32", "none"), (f"Top-{args.keep:.0%}", "topk"),
                               (f"Top-{args.keep:.0%} + INT8", "topk_int8")):
        sent, sizes = one_step(compression, args.keep)
        d = sum(sizes.values())
        ks = [kept(size, args.keep) for size in sizes.values()]
        payload = {"none": 4 * d, "topk": sum(8 * k for k in ks),
                   "topk_int8": sum(5 * k + 4 for k in ks)}[compression]
        upload = sum(m.nbytes for m in sent if m.tag in ("commit", "reveal")) / WORKERS
        per_node = sum(m.nbytes for m in sent) / n
        rows.append((label, 48 + payload, upload, per_node))
    allreduce = 2 * (n - 1) / n * 4 * d
    print(f"tiny-llama, d = {d:,}; {WORKERS} workers, {AGGREGATORS} aggregators, "
          f"fanout 2, 3 gossip rounds; one step; bytes")
    print(f"{'setting':>18} {'upload closed':>14} {'upload measured':>16} "
          f"{'per node, all traffic':>22} {'vs FP32 all-reduce':>19}")
    print(f"{'FP32 all-reduce':>18} {'':>14} {'':>16} {allreduce:>22,.0f} {1.0:>18.3f}×")
    for label, closed, upload, per_node in rows:
        assert math.isclose(closed, upload), (label, closed, upload)
        print(f"{label:>18} {closed:>14,.0f} {upload:>16,.0f} {per_node:>22,.0f} "
              f"{per_node / allreduce:>18.4f}×")
    default = rows[-1][3]
    print(f"DSO default (Top-{args.keep:.0%} + INT8 + two tiers): {allreduce / default:,.0f}× "
          f"less per node than an FP32 all-reduce")


if __name__ == "__main__":
    main()
