"""Checkpoints: everything a run needs to continue bit-identically, written atomically.

Every ``checkpoint.every`` rounds the run directory gets ``checkpoint-<round>/`` —
``clients/<cid>.pt`` (each client's own model tensors, typed strategy state, optimiser,
generator and global-RNG states, a Byzantine client's attack history), ``process.pt``
(the strategy's per-process object and, when the strategy writes them, the shared frozen
weights: stored once, not per client) and ``router.pt`` (messages in flight, the run's
byte counters) — and then ``checkpoint.json`` names it. The folder is complete before the
pointer moves (both by rename), so a run killed at any moment leaves the previous
checkpoint readable; older folders are removed after.

The simulated clock and the round's counters are in ``metrics.jsonl`` (totals are sums
of its rows); link draws, speed factors and fault decisions are functions of the seeds
and are not stored.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from decent.core.errors import ConfigError

FORMAT = 1  # bumped whenever what a checkpoint holds changes
POINTER = "checkpoint.json"


def write(run_dir: Path, next_round: int, state: dict[str, Any], extra: dict[str, Any]) -> None:
    """Store ``state`` (``clients``: cid → saved client, ``process``, ``router``) as the
    checkpoint to resume at ``next_round``."""
    name = f"checkpoint-{next_round:06d}"
    tmp = run_dir / f".{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "clients").mkdir(parents=True)
    for cid, saved in state["clients"].items():
        torch.save(saved, tmp / "clients" / f"{cid}.pt")
    torch.save(state["process"], tmp / "process.pt")
    torch.save(state["router"], tmp / "router.pt")
    shutil.rmtree(run_dir / name, ignore_errors=True)
    os.replace(tmp, run_dir / name)
    pointer = {"format": FORMAT, "round": next_round, "dir": name,
               "clients": len(state["clients"]), **extra}
    (run_dir / f".{POINTER}.tmp").write_text(json.dumps(pointer, indent=2) + "\n")
    os.replace(run_dir / f".{POINTER}.tmp", run_dir / POINTER)
    for old in run_dir.glob("checkpoint-*"):
        if old.name != name:
            shutil.rmtree(old, ignore_errors=True)


def pointer(run_dir: Path) -> dict[str, Any]:
    """The checkpoint a run directory can resume from; one line if there is none usable."""
    path = run_dir / POINTER
    if not path.is_file():
        raise ConfigError("run_dir", f"{run_dir} has no checkpoint to resume from: runs "
                          "write one every checkpoint.every rounds (0 by default); rerun "
                          "with e.g. checkpoint.every=10")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError("run_dir", f"{path} is unreadable ({exc})") from None
    if data.get("format") != FORMAT:
        raise ConfigError("run_dir", f"{run_dir} was checkpointed by another version of "
                          f"decent (format {data.get('format')}; this one reads format "
                          f"{FORMAT}); resume it with that version")
    if not (run_dir / data["dir"]).is_dir():
        raise ConfigError("run_dir", f"{run_dir}: the checkpoint folder {data['dir']} is "
                          "missing")
    return data


def read(run_dir: Path, info: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint ``info`` names, on the CPU (restoring moves it to the device)."""
    folder = run_dir / info["dir"]
    load = {"map_location": "cpu", "weights_only": False}
    clients = {int(p.stem): torch.load(p, **load) for p in (folder / "clients").glob("*.pt")}
    return {"clients": clients, "process": torch.load(folder / "process.pt", **load),
            "router": torch.load(folder / "router.pt", **load)}
