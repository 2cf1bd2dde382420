"""DSO's bandwidth ladder: bytes per step, FP32 → Top-1 % → + INT8 → + two tiers.

One step of DSO on ``tiny-llama`` (Shakespeare) with 40 workers around 4 aggregators
(`two_tier`, fanout 2, 3 gossip rounds), once per compression setting, every message
counted by the router; beside each measured figure its closed form:

* worker upload = 32 B commitment + 16 B nonce + the payload: 4·d dense, 8·k for Top-k
  (int32 index + fp32 value), 5·k + 4 for Top-k + INT8 (one scale), k = ⌈keep·d⌉ over
  the whole gradient (DSO's default scope; per tensor, ``--scope per_tensor``: Σ_t over
  the tensors with k_t = ⌈keep·|t|⌉, and one scale per tensor);
* all traffic of the step over all n = 44 nodes (uploads, gossip among the aggregators and
  each aggregator's set G down to its workers), per node;
* the reference: a ring all-reduce of the dense fp32 gradient, 2·(n − 1)/n · 4·d per node.

The ratios are to the FP32 all-reduce, as the report's table (40 → 0.52 → 0.12 → 0.024
GB/s, 1 667×, for a 7 B model). The last lines give the upload's reduction for a 7 B model
with the same encoding, where the rounding of k and the 48 B of commitment and nonce
vanish: 4·d / (8·keep·d) = 50× for Top-1 % and 4·d / (5·keep·d) = 80×
with INT8 — the index bytes included, which the report's 77× and 333× leave out.

    python benchmarks/dso_bandwidth.py [--keep 0.01] [--scope global]
                                       [--out experiments/dso/report/bandwidth.md]
"""

from __future__ import annotations

import argparse
import math
import tempfile

from decent.backends.local import local_engine
from decent.compression.topk import GLOBAL, PER_TENSOR, SCOPES, kept
from decent.engine.config import from_dict
from decent.models import params

WORKERS, AGGREGATORS = 40, 4


def one_step(compression: str, keep: float, scope: str) -> tuple[list, dict]:
    with tempfile.TemporaryDirectory() as out:
        cfg = from_dict({
            "name": "ladder", "rounds": 1,
            "topology": {"name": "two_tier", "n": WORKERS + AGGREGATORS,
                         "aggregators": AGGREGATORS},
            "strategy": {"name": "dso", "batch_size": 2,
                         "compression": {"name": compression} if compression == "identity"
                         else {"name": compression, "keep": keep, "scope": scope},
                         "fanout": 2, "gossip_rounds": 3, "probe_batches": 1},
            "task": {"name": "lm", "corpus": "shakespeare", "seq_len": 32,
                     "max_tokens": 100_000, "max_eval_sequences": 2},
            "model": {"name": "causal_lm", "path": "tiny-llama"},
            "eval": {"every": 0, "per_client": False},
            "tracking": {"out_dir": out, "progress": False, "wandb": {"mode": "disabled"}},
        })
        backend = local_engine(cfg)
        sent = backend.record_messages()
        backend.run_round(0)
        sizes = {n: p.numel() for n, p in
                 params.trainable_params(backend.group.clients[0].model).items()}
        backend.close()
    return sent, sizes


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--keep", type=float, default=0.01)
    p.add_argument("--scope", choices=SCOPES, default=GLOBAL)
    p.add_argument("--out", default=None, help="also write the table to this file")
    args = p.parse_args()
    lines = table(args.keep, args.scope)
    print("\n".join(lines))
    if args.out:
        flags = ('' if args.keep == 0.01 else f' --keep {args.keep}') + \
            ('' if args.scope == GLOBAL else f' --scope {args.scope}')
        with open(args.out, "w") as f:
            f.write(f"```\n$ python benchmarks/dso_bandwidth.py{flags} --out {args.out}\n"
                    + "\n".join(lines) + "\n```\n")


def table(keep: float, scope: str = GLOBAL) -> list[str]:
    """The ladder's lines (one step per setting, checked against the closed forms)."""
    out: list[str] = []
    n = WORKERS + AGGREGATORS
    rows = []
    for label, compression in (("FP32", "identity"), (f"Top-{keep:.0%}", "topk"),
                               (f"Top-{keep:.0%} + INT8", "topk_int8")):
        sent, sizes = one_step(compression, keep, scope)
        d = sum(sizes.values())
        ks = [kept(size, keep) for size in sizes.values()] if scope == PER_TENSOR \
            else [kept(d, keep)]
        payload = {"identity": 4 * d, "topk": sum(8 * k for k in ks),
                   "topk_int8": sum(5 * k + 4 for k in ks)}[compression]
        upload = sum(m.nbytes for m in sent if m.tag in ("commit", "reveal")) / WORKERS
        per_node = sum(m.nbytes for m in sent) / n
        rows.append((label, 48 + payload, upload, per_node))
    allreduce = 2 * (n - 1) / n * 4 * d
    out.append(f"tiny-llama, d = {d:,}; {WORKERS} workers, {AGGREGATORS} aggregators, "
               f"fanout 2, 3 gossip rounds; Top-k scope {scope}; one step; bytes")
    out.append(f"{'setting':>18} {'upload closed':>14} {'upload measured':>16} "
               f"{'per node, all traffic':>22} {'vs FP32 all-reduce':>19}")
    out.append(f"{'FP32 all-reduce':>18} {'':>14} {'':>16} {allreduce:>22,.0f} {1.0:>18.3f}×")
    for label, closed, upload, per_node in rows:
        assert math.isclose(closed, upload), (label, closed, upload)
        out.append(f"{label:>18} {closed:>14,.0f} {upload:>16,.0f} {per_node:>22,.0f} "
                   f"{per_node / allreduce:>18.4f}×")
    default = rows[-1][3]
    out.append(f"DSO default (Top-{keep:.0%} + INT8 + two tiers): {allreduce / default:,.0f}× "
               f"less per node than an FP32 all-reduce")
    fp32 = rows[0][1]
    out.append(f"upload vs FP32 here: Top-{keep:.0%} {fp32 / rows[1][1]:.0f}×, "
               f"+ INT8 {fp32 / rows[2][1]:.0f}×; at 7 B (int32 index + fp32 value, or + "
               f"INT8): {4 / (8 * keep):.0f}× and {4 / (5 * keep):.0f}×")
    return out


if __name__ == "__main__":
    main()
