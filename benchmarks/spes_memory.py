"""SPES against DiLoCo/FedAvg: one node's training memory, and bytes per round.

1. **Memory.** One node training ``moe-300m`` (OLMoE class, 12 layers, 16 experts of
   intermediate 1024, top-2; 315 M parameters) with AdamW, batch 2 × 64 tokens:
   * by accounting: parameters + gradients + AdamW's two moments, fp32:
     DiLoCo/FedAvg 4d + 4d + 8d; SPES 4d + 12·(|φ| + |P_i|);
   * measured: the peak resident memory (VmHWM, reset after the model is built) of two
     training steps in a fresh process per setting, run through the strategies' own
     ``init_process``/``init_state`` and ``local_steps`` on a real ``Client``; SPES with
     N = 4, 8, 16 nodes (16 nodes: one expert per layer each, the paper's 2B setting).
2. **Bytes per round**, per worker, up and down: closed form (SPES up 4·(|φ| + |P_i|),
   down 4·d; DiLoCo 4·d both ways) for ``moe-300m``, and measured from one round of
   ``small-moe`` (3.4 M) with 4 and 8 workers through the router, beside its closed form.

    python benchmarks/spes_memory.py [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

MiB = 2**20


def vm(field: str) -> int:
    """A /proc/self/status figure in bytes (VmRSS, VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def config(method: str, nodes: int, model: str, out: str) -> dict:
    strategy = {"name": method, "local_steps": 2, "batch_size": 2, "lr": 3e-4,
                "weight_decay": 0.0, "router_loss": {"balance": 0.01, "z": 0.001}}
    if method == "spes":  # the paper's 2 000-step warm-up is longer than these two steps
        strategy.update(merge_warmup_steps=0, lr_schedule={"name": "constant"})
    return {"name": f"{method}-{nodes}", "rounds": 1, "topology": {"name": "star", "n": nodes + 1},
            "strategy": strategy,
            "task": {"name": "lm", "corpus": "shakespeare", "seq_len": 64,
                     "max_tokens": 200_000, "partition": "contiguous", "max_eval_sequences": 8},
            "model": {"name": "causal_lm", "path": model},
            "eval": {"every": 0, "per_client": False},
            "tracking": {"out_dir": out, "progress": False, "wandb": {"mode": "disabled"}}}


def train_once(method: str, nodes: int, threads: int) -> dict:
    """Worker 1 of ``nodes``: build, then two training steps; memory and step time."""
    from decent.engine.config import from_dict
    from decent.engine.group import build_task
    from decent.engine.plan import build_plan
    from decent.models.causal_lm import build_causal_lm
    from decent.strategies.base import Client
    from decent.strategies.local_training import local_steps

    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as out:
        cfg = from_dict(config(method, nodes, "moe-300m", out))
    strategy = build_plan(cfg).strategy
    task = build_task(cfg)
    data = task.client_data([1], torch.device("cpu"))[1]
    torch.manual_seed(0)
    model = build_causal_lm(cfg.model)
    shared = strategy.init_process(model)
    client = Client(cid=1, model=model, data=data, device=torch.device("cpu"),
                    generator=torch.Generator().manual_seed(1))
    client.state = strategy.init_state(client, shared)
    params = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    static = vm("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # peak RSS from here on
    local_steps(client, client.state.optimizer, task, 2, 2, cfg.strategy, 0)
    held = sum(t.numel() for s in client.state.optimizer.state.values()
               for t in s.values() if torch.is_tensor(t) and t.dim() > 0)
    return {"params": params, "trainable": trainable, "optimizer_values": held,
            "static_rss": static, "peak_rss": vm("VmHWM")}


def measured_bytes(method: str, nodes: int) -> tuple[float, float, int]:
    """Mean bytes per worker up and down in one round of small-moe; the model size."""
    from decent.backends.local import local_engine
    from decent.engine.config import from_dict

    with tempfile.TemporaryDirectory() as out:
        cfg = config(method, nodes, "small-moe", out)
        cfg["strategy"]["local_steps"] = 1
        backend = local_engine(from_dict(cfg))
        sent = backend.record_messages()
        backend.run_round(0)
        d = sum(p.numel() for p in backend.group.clients[0].model.parameters())
        backend.close()
    up = sum(m.nbytes for m in sent if m.dst == 0) / nodes
    down = sum(m.nbytes for m in sent if m.src == 0) / nodes
    return up, down, d


def closed_form(nodes: int, model: str) -> tuple[float, float, int, int]:
    """SPES's bytes per worker up and down (the mean over workers), |φ|, d."""
    from decent.models.causal_lm import CausalLMConfig, build_causal_lm
    from decent.models.experts import shared_parameter_names

    torch.manual_seed(0)
    m = build_causal_lm(CausalLMConfig(path=model))
    sizes = dict(m.named_parameters())
    d = sum(p.numel() for p in m.parameters())
    phi = sum(sizes[n].numel() for n in shared_parameter_names(m))
    return 4 * (phi + (d - phi) / nodes), 4 * d, phi, d


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--nodes", type=int, nargs="+", default=[4, 8, 16])
    p.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(json.dumps(train_once(args.one[0], int(args.one[1]), args.threads)))
        return

    def child(method: str, nodes: int) -> dict:
        out = subprocess.run([sys.executable, __file__, "--one", method, str(nodes),
                              "--threads", str(args.threads)],
                             check=True, capture_output=True, text=True).stdout
        return json.loads(out.strip().splitlines()[-1])

    print("1. one node training moe-300m, AdamW fp32, batch 2 × 64 tokens (fresh process each)")
    full = child("diloco", args.nodes[0])
    d = full["params"]
    print(f"   d = {d:,} parameters; DiLoCo/FedAvg trains all of them")
    print(f"{'setting':>16} {'trainable':>12} {'p+g+opt MiB':>12} {'ratio':>6} "
          f"{'static MiB':>11} {'peak MiB':>9} {'peak ratio':>10}")

    def row(name: str, r: dict) -> None:
        acct = 4 * r["params"] + 12 * r["trainable"]
        # AdamW keeps two moments of each trainable tensor that got a gradient (an expert
        # no token was routed to in these steps has none yet)
        assert r["optimizer_values"] <= 2 * r["trainable"]
        print(f"{name:>16} {r['trainable']:>12,} {acct / MiB:>12,.0f} "
              f"{acct / (16 * d):>6.2f} {r['static_rss'] / MiB:>11,.0f} "
              f"{r['peak_rss'] / MiB:>9,.0f} {r['peak_rss'] / full['peak_rss']:>10.2f}")

    row("DiLoCo/FedAvg", full)
    for nodes in args.nodes:
        row(f"SPES, {nodes} nodes", child("spes", nodes))

    _, _, phi, dd = closed_form(1, "moe-300m")
    print(f"\n2. bytes per worker per round (MB), SPES vs DiLoCo; moe-300m: |φ| = {phi:,} "
          f"({phi / dd:.1%} of d)")
    print(f"{'model':>10} {'nodes':>5} {'':>9} {'SPES up':>9} {'SPES down':>9} "
          f"{'DiLoCo up':>9} {'DiLoCo down':>11} {'up ratio':>8} {'total ratio':>11}")
    for nodes in args.nodes:
        up, down, _, dd = closed_form(nodes, "moe-300m")
        print(f"{'moe-300m':>10} {nodes:>5} {'closed':>9} {up / 1e6:>9.1f} {down / 1e6:>9.1f} "
              f"{4 * dd / 1e6:>9.1f} {4 * dd / 1e6:>11.1f} {up / (4 * dd):>8.3f} "
              f"{(up + down) / (8 * dd):>11.3f}")
    for nodes in (4, 8):
        up_c, down_c, _, dd = closed_form(nodes, "small-moe")
        up, down, _ = measured_bytes("spes", nodes)
        dup, ddown, _ = measured_bytes("diloco", nodes)
        for label, (u, w, du, dw) in (("closed", (up_c, down_c, 4 * dd, 4 * dd)),
                                      ("measured", (up, down, dup, ddown))):
            print(f"{'small-moe':>10} {nodes:>5} {label:>9} {u / 1e6:>9.2f} {w / 1e6:>9.2f} "
                  f"{du / 1e6:>9.2f} {dw / 1e6:>11.2f} {u / du:>8.3f} "
                  f"{(u + w) / (du + dw):>11.3f}")


if __name__ == "__main__":
    main()
