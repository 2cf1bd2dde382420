"""What compression buys and costs in gossip, measured side by side in one run.

1. Per message, on the real tensor shapes of SmolLM2-135M (all 134.5M parameters, and its
   LoRA adapters r=8 on q_proj/v_proj): wire bytes, compress and decompress time, and
   relative error ‖x − D(C(x))‖ / ‖x‖ for a Gaussian x (the shape of a CHOCO difference
   θ − θ̂), for dense fp32, Top-K 1% (int32 index + fp32 value) and INT8.
2. Per round, tiny-llama on Shakespeare, 8 clients on a ring, local backend: wall time of a
   DSGD round against CHOCO rounds (Top-K 1%, INT8) and a GASLoC round, alternating
   strategies round by round (median of ``--rounds``).

    python benchmarks/gossip_compression.py [--repeats 3] [--rounds 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from decent.backends.local import local_engine
from decent.compression import CompressionConfig, build_compressor
from decent.compression.topk import TopKConfig
from decent.core.messages import wire_size
from decent.engine.config import from_dict
from decent.models.causal_lm import CausalLMConfig, build_causal_lm
from decent.models.lora import LoRAConfig

COMPRESSORS = {
    "dense fp32": CompressionConfig(name="identity"),
    "top-k 1%": TopKConfig(keep=0.01),
    "int8": CompressionConfig(name="int8"),
}


def timed(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def per_message(model: torch.nn.Module, label: str, repeats: int) -> None:
    gen = torch.Generator().manual_seed(0)
    tensors = {n: torch.randn(p.shape, generator=gen) for n, p in model.named_parameters()
               if p.requires_grad}
    d = sum(t.numel() for t in tensors.values())
    norm = torch.sqrt(sum((t.double() ** 2).sum() for t in tensors.values()))
    print(f"\n{label}: d = {d:,} trainable entries, median of {repeats}")
    print(f"{'compressor':>12} {'wire bytes':>14} {'/dense':>8} {'compress s':>11} "
          f"{'decompress s':>13} {'rel. error':>11}")
    for name, cfg in COMPRESSORS.items():
        comp = build_compressor(cfg)
        t_c, payload = timed(lambda c=comp: {n: c.compress(t) for n, t in tensors.items()},
                             repeats)
        t_d, dense = timed(lambda c=comp, p=payload: {n: c.decompress(p[n], t)
                                                      for n, t in tensors.items()}, repeats)
        err = torch.sqrt(sum(((dense[n] - t).double() ** 2).sum() for n, t in tensors.items()))
        nbytes = wire_size(payload)
        print(f"{name:>12} {nbytes:>14,} {nbytes / (4 * d):>8.4f} {t_c:>11.3f} {t_d:>13.3f} "
              f"{float(err / norm):>11.4f}")


def per_round(rounds: int) -> None:
    common = {"local_steps": 5, "batch_size": 16, "optimizer": "adamw", "lr": 3e-3}
    strategies = {
        "dsgd": {"name": "dsgd", **common},
        "choco top-k 1%": {"name": "choco", **common,
                           "compression": {"name": "topk", "keep": 0.01}},
        "choco int8": {"name": "choco", **common, "compression": {"name": "int8"}},
        "gasloc": {"name": "gasloc", **common},
    }
    backends = {}
    for label, strategy in strategies.items():
        backends[label] = local_engine(from_dict({
            "name": "bench", "seed": 0, "rounds": rounds, "topology": {"name": "ring", "n": 8},
            "strategy": strategy,
            "task": {"name": "lm", "corpus": "shakespeare", "seq_len": 128,
                     "max_eval_sequences": 8},
            "model": {"name": "causal_lm", "path": "tiny-llama"},
            "tracking": {"progress": False, "wandb": {"mode": "disabled"}},
        }))
    times: dict[str, list[float]] = {k: [] for k in backends}
    edge_bytes: dict[str, int] = {}
    for r in range(rounds):
        for label, backend in backends.items():
            t0 = time.perf_counter()
            _, traffic = backend.run_round(r)
            times[label].append(time.perf_counter() - t0)
            edge_bytes[label] = max(traffic.edge_bytes.values())
    base = statistics.median(times["dsgd"])
    print(f"\ntiny-llama on Shakespeare, ring of 8, 5 AdamW steps per round, local backend, "
          f"median of {rounds} alternating rounds")
    print(f"{'strategy':>16} {'s/round':>8} {'/dsgd':>6} {'bytes per edge':>15}")
    for label, ts in times.items():
        med = statistics.median(ts)
        print(f"{label:>16} {med:>8.3f} {med / base:>6.2f} {edge_bytes[label]:>15,}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model = build_causal_lm(CausalLMConfig(), {})
    per_message(model, "SmolLM2-135M, every parameter", args.repeats)
    lora = build_causal_lm(CausalLMConfig(lora=LoRAConfig(enabled=True)), {})
    per_message(lora, "SmolLM2-135M, LoRA r=8 on q_proj/v_proj", args.repeats)
    per_round(args.rounds)


if __name__ == "__main__":
    main()
