"""Checkpoint size and write time for SmolLM2-135M clients.

* LoRA-DSGD (rank 8 on q_proj/v_proj, AdamW): each client stores its adapters and their
  AdamW moments; the frozen base is rebuilt from the config and not stored.
* SeedFlood/SubCGE (rank 64, refresh every 100 iterations): each client stores its r×r
  buffers and 1-D tensors; the process stores the shared weights that refreshes fold into,
  once for all clients.

Each configuration is built on the local backend, runs --rounds rounds (0: the state right
after start, same shapes as later), then one checkpoint is written; the times are medians
of --repeats, side by side in one process:

* ``plain s``: the state captured and each file written by a bare ``torch.save`` (no
  fsync, no hash, no manifest: what a checkpoint cost before it was committed durably);
* ``commit s``: :func:`decent.run.checkpoint.write` — captured, encoded as plain data,
  hashed, every file and folder ``fsync``-ed, the manifest written last, renamed;
* ``verify s``: every file re-hashed against the manifest (what ``decent resume`` and
  ``decent verify`` do first);
* ``load s``: the files read back with ``weights_only=True`` and decoded.

    python benchmarks/checkpoint_cost.py [--lora-clients 8] [--subcge-clients 128]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch


def plain_save(folder: Path, state: dict) -> None:
    (folder / "clients").mkdir(parents=True, exist_ok=True)
    for cid, saved in state["clients"].items():
        torch.save(saved, folder / "clients" / f"{cid}.pt")
    torch.save(state["process"], folder / "process.pt")
    torch.save({"router": state["router"], "lost": state["lost"]}, folder / "router.pt")


def measure(cfg_dict: dict, rounds: int, repeats: int) -> tuple[float, ...]:
    from decent.backends.local import local_engine
    from decent.engine.config import from_dict, to_yaml
    from decent.run import checkpoint

    cfg = from_dict(cfg_dict)
    backend = local_engine(cfg)
    for r in range(rounds):
        backend.run_round(r)
    times: dict[str, list[float]] = {"plain": [], "commit": [], "verify": [], "load": []}
    with tempfile.TemporaryDirectory() as out:
        run_dir = Path(out)
        (run_dir / "config.yaml").write_text(to_yaml(cfg))
        (run_dir / "metrics.jsonl").write_text("")
        name = checkpoint.folder_name(rounds)
        for k in range(repeats):
            t0 = time.perf_counter()
            plain_save(run_dir / f"plain-{k}", backend.save_state())
            times["plain"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            checkpoint.write(run_dir, rounds, backend.save_state(), {})
            times["commit"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            assert checkpoint.problems(run_dir, name) == []
            times["verify"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            checkpoint.read(checkpoint.select(run_dir, say=lambda _: None)[0])
            times["load"].append(time.perf_counter() - t0)
        folder = run_dir / name
        clients = sum(p.stat().st_size for p in (folder / "clients").glob("*.pt"))
        process = (folder / "process.pt").stat().st_size
        total = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    medians = [statistics.median(times[k]) for k in ("plain", "commit", "verify", "load")]
    return (*medians, total / 2**20, clients / cfg.n / 2**20, process / 2**20)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lora-clients", type=int, default=8)
    p.add_argument("--subcge-clients", type=int, default=128)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    task = {"name": "rotten_tomatoes", "num_train": 256, "num_val": 0, "num_test": 8,
            "max_length": 32, "eval_batch_size": 8}
    common = {"eval": {"every": 0, "per_client": False},
              "tracking": {"out_dir": tempfile.mkdtemp(), "progress": False,
                           "wandb": {"mode": "disabled"}}}
    rows = []
    lora = {"name": "lora", "rounds": args.rounds,
            "topology": {"name": "ring", "n": args.lora_clients},
            "strategy": {"name": "dsgd", "optimizer": "adamw", "lr": 1e-4, "local_steps": 1,
                         "batch_size": 2},
            "task": task, "model": {"name": "causal_lm", "lora": {"enabled": True}}, **common}
    rows.append(("LoRA-DSGD", args.lora_clients, args.rounds,
                 *measure(lora, args.rounds, args.repeats)))
    subcge = {"name": "subcge", "rounds": args.rounds,
              "topology": {"name": "meshgrid", "n": args.subcge_clients},
              "strategy": {"name": "seedflood", "batch_size": 2, "rank": 64,
                           "refresh_every": 100},
              "task": task, "model": {"name": "causal_lm"}, **common}
    rows.append(("SeedFlood/SubCGE", args.subcge_clients, args.rounds,
                 *measure(subcge, args.rounds, args.repeats)))
    print(f"SmolLM2-135M checkpoints, median of {args.repeats} writes")
    print(f"{'method':<17} {'clients':>7} {'plain s':>8} {'commit s':>9} {'ratio':>6} "
          f"{'verify s':>9} {'load s':>7} {'total MB':>9} {'MB/client':>10} "
          f"{'shared MB':>10}")
    for name, n, _, plain, commit, verify, load, total, per_client, shared in rows:
        print(f"{name:<17} {n:>7} {plain:>8.2f} {commit:>9.2f} {commit / plain:>6.2f} "
              f"{verify:>9.2f} {load:>7.2f} {total:>9.1f} {per_client:>10.2f} "
              f"{shared:>10.1f}")


if __name__ == "__main__":
    main()
