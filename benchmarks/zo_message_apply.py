"""Applying SeedFlood messages on SmolLM2-135M: SubCGE coordinate updates against MeZO's
dense regeneration (the SeedFlood paper's Table 4 / Figure 5, on this CPU).

A message (seed, c) means θ ← θ − c·z(seed). MeZO regenerates a 134.5M-entry Gaussian per
message (O(d)); SubCGE (rank 64) updates one entry of each layer's 64×64 buffer A and the
1-D tensors (O(#layers + d_1D)). MeZO at n = 128 is extrapolated from its measured
per-message time (the cost is exactly linear in n); everything else is measured. Also: one
forward pass on a batch of 16 classification prompts, and one SubCGE ZO step (two
perturbed forwards) against it.

    python benchmarks/zo_message_apply.py [--repeats 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from decent.models.causal_lm import CausalLMConfig, build_causal_lm
from decent.models.params import trainable_params
from decent.tasks.prompted import PromptedConfig, PromptedTask
from decent.zo import mezo
from decent.zo.estimators import SubCGE


def timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rank", type=int, default=64)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    cfg = CausalLMConfig()
    model = build_causal_lm(cfg, {}).eval()
    task = PromptedTask(PromptedConfig(name="rotten_tomatoes", num_train=16, num_val=0,
                                       num_test=16), 0, cfg)
    ids, mask, y = task.held_out.rows(torch.arange(16))
    msgs = [(1000 + s, 1e-6) for s in range(1024)]

    dense = list(trainable_params(model).values())
    per_msg = timed(lambda: mezo.apply_updates(dense, msgs[:4]), args.repeats) / 4
    mezo_16 = timed(lambda: mezo.apply_updates(dense, msgs[:16]), 1)

    # the Linear layers, as its record (benchmarks/results) was made before all_2d became
    # the default; the embedding's one layer more adds one entry per message
    zo = SubCGE(args.rank, seed=0, layers="linear")
    zo.prepare_base(model)
    replica = zo.init_replica(model)
    sub = {n: timed(lambda n=n: zo.apply(replica, msgs[:n]), args.repeats)
           for n in (16, 128, 1024)}

    with torch.no_grad():
        forward = timed(lambda: task.loss(model, (ids, mask, y)), args.repeats)
        step = timed(lambda: zo.estimate(model, replica,
                                         lambda: float(task.loss(model, (ids, mask, y))),
                                         7, 1e-3), args.repeats)
    print(f"SmolLM2-135M, SubCGE rank {args.rank} over {zo.basis.num_layers} Linear layers, "
          f"{args.threads} threads, median of {args.repeats}")
    print(f"{'messages':>8} {'MeZO ms':>10} {'SubCGE ms':>10} {'MeZO/SubCGE':>12}")
    rows = [(16, mezo_16 * 1e3, "measured"), (128, per_msg * 128e3, "extrapolated"),
            (1024, per_msg * 1024e3, "extrapolated")]
    for n, mezo_ms, how in rows:
        print(f"{n:>8} {mezo_ms:>10.0f} {sub[n] * 1e3:>10.2f} {mezo_ms / (sub[n] * 1e3):>11.0f}×"
              f"  (MeZO {how})")
    print(f"one forward pass, batch 16 ({int(mask.sum())} tokens): {forward * 1e3:.0f} ms; "
          f"1 024 SubCGE messages take {sub[1024] / forward:.2f} of it")
    print(f"one SubCGE ZO step (2 perturbed forwards): {step * 1e3:.0f} ms = "
          f"{step / forward:.2f} forward passes")


if __name__ == "__main__":
    main()
