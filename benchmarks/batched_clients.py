"""Round time and peak memory of batched client execution (``execution.mode: batched``)
against sequential execution and against a bare Python loop doing the same arithmetic.

Workloads (every client trains every round; H = 5 local steps of batch 32, SGD lr 0.05):

- MLP 64→64→10 on ``digits``: FedAvg on a star (server at vertex 0, so n = clients + 1)
  and DSGD on a ring (n = clients), momentum 0, at ``--clients`` (16 64 256 1 024); plus
  DSGD with momentum 0.9 at ``--momentum-clients`` (64);
- the CIFAR-10 CNN of :mod:`decent.models.cnn` (channels 32/64, hidden 512): DSGD on a ring
  at ``--cnn-clients`` (16 64), on random images of CIFAR's shape (a ``cifar10`` folder
  written once in a temporary directory, read with ``task.data_dir``).

- LoRA-DSGD on SmolLM2-135M (rank 8 on q/v, dropout 0, one AdamW step of 4 examples per
  client) at ``--lm-clients`` (1 4 16), 2 torch threads, on SST-2 prompts (``--data-dir``
  holding ``sst2/train.jsonl``; varying length) and on 64-token Shakespeare sequences:
  examples per second of one process, sequential vs batched
  (the platform's local phase on a :class:`~decent.engine.group.ClientGroup` of every
  client, the message it sends included), and each arm's peak memory. SeedFlood and the
  other zeroth-order methods are not batched (their estimates run one client at a time;
  ``auto`` falls back), so they have no row.

Three arms per MLP/CNN workload and size:

- ``sequential``: the platform, ``execution.mode: sequential`` (one client after another);
- ``batched``: the platform, ``execution.mode: batched`` (``--chunk`` clients, default 256,
  stacked per computation);
- ``bare``: the same math as a plain Python loop over clients, no platform code: per client
  an ``nn.Sequential`` (the MLP, or the CNN built by ``decent.models.cnn.build_cnn``), its
  own ``torch.optim.SGD`` and its own ``torch.Generator``; each round 5 steps of a batch of
  32 drawn with replacement from the client's shard (a random tensor of the task's size and
  shape, 1 438 digits rows or 32 CIFAR images per CNN client, split into one shard per
  client), cross-entropy, backward, ``step()``; then, for FedAvg, the server's average of
  the deltas θ − θ_i applied to θ (outer SGD, lr 1) and θ loaded by every worker; for DSGD,
  each client's Metropolis average with its two ring neighbours (1/3 each).

Round time. A platform arm is the local backend's engine (every client in this process,
:func:`decent.backends.local.local_engine`) and one round is :meth:`Engine.run_round`:
every phase of the round (local steps and the message each client sends, FedAvg's
aggregate and sync, DSGD's gossip), routed and accounted as in a real run, with evaluation
off. A bare round is one pass of the loop above. All arms of one workload and size are
built side by side in this process and each runs one warm-up round; then, ``--repeats``
times (default 3), each arm runs ``--rounds`` rounds (``--cnn-rounds`` for the CNN), the
arms taking turns (their order rotated each repeat). An arm's s/round is the median over
repeats of its median round time in the repeat; a ratio (sequential ÷ bare, batched ÷
bare, batched ÷ sequential) is the median of the per-repeat ratios, so a burst of load
from elsewhere skews one repeat at most. torch runs on one thread
(``torch.set_num_threads(1)``: the platform's default ``torch_threads: 1``).

Peak memory. Each arm of each workload and size is built again in a fresh ``python``
subprocess, which runs ``--rounds`` rounds (``--cnn-rounds`` for the CNN) and reports its
peak resident memory (``VmHWM`` of ``/proc/self/status``: interpreter, imports, data,
clients and the rounds' temporaries); the table gives it per arm and batched ÷
sequential. The arms run one after another, so memory is not measured side by side.

Equivalence. The committed quick configs of the batchable methods (``--equivalence``:
the quick start's DSGD, Combo on digits with and without churn, GASLoC on linear
regression) run through the runner (:func:`decent.run.runner.run`, W&B off, output under a
temporary directory) once per mode: the final global-mean-model test accuracy (the loss
where the task has no accuracy) in each, whether they agree to 3 decimals, and the
largest |Δθ| between the two runs' final client parameters.

Targets printed next to the figures: MLP batched ≤ 0.2× bare at 64 clients and ≤ 0.1× at
1 024; CNN batched ≤ 0.5× bare at 64; peak memory batched ≤ 1.2× sequential.

The output is printed and written to ``--out`` (default
``benchmarks/results/batched_clients.txt``; ``-`` for none).

    python benchmarks/batched_clients.py [--clients 16 64 256 1024] [--repeats 3]
        [--rounds 5] [--cnn-clients 16 64] [--cnn-rounds 1] [--chunk 256]
        [--lm-clients 1 4 16] [--lm-chunks 256 4] [--lm-tasks sst2 lm] [--equivalence ...]
"""

from __future__ import annotations

import argparse
import copy
import datetime
import gc
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "benchmarks" / "results" / "batched_clients.txt"
# the committed quick configs of the batchable methods (DSGD, Combo, Combo with churn,
# GASLoC)
QUICK_CONFIGS = ["experiments/quickstart.yaml", "experiments/combo/digits.yaml",
                 "experiments/combo/churn.yaml", "experiments/gasloc/acceleration.yaml"]
ARMS = ("bare", "sequential", "batched")
LOCAL_STEPS, BATCH, LR = 5, 32, 0.05
DIGITS_TRAIN = 1438  # digits' 1 797 rows less the 20 % test split
CIFAR_PER_CLIENT = 32  # training images per client in the CNN's random CIFAR folder
CIFAR_TEST = 100
# (workload, clients) → the most batched ÷ bare that meets the target
SPEED_TARGETS = {("mlp", 64): 0.2, ("mlp", 1024): 0.1, ("cnn", 64): 0.5}
MEMORY_TARGET = 1.2  # batched ÷ sequential peak RSS


@dataclass(frozen=True)
class Case:
    """One workload: a method on a model, with the inner SGD's momentum."""

    key: str
    method: str  # fedavg | dsgd
    model: str  # mlp | cnn
    momentum: float

    @property
    def label(self) -> str:
        return f"{self.method} {self.model}" + (f" m={self.momentum}" if self.momentum else "")

    def n(self, clients: int) -> int:
        """Vertices of the graph: FedAvg's star adds the server."""
        return clients + 1 if self.method == "fedavg" else clients


CASES = {c.key: c for c in (Case("fedavg-mlp", "fedavg", "mlp", 0.0),
                            Case("dsgd-mlp", "dsgd", "mlp", 0.0),
                            Case("dsgd-mlp-m", "dsgd", "mlp", 0.9),
                            Case("dsgd-cnn", "dsgd", "cnn", 0.0))}


# ---------------------------------------------------------------------- platform arms
def platform_config(case: Case, clients: int, mode: str, chunk: int, rounds: int,
                    cifar: str | None, out_dir: str) -> dict[str, Any]:
    topology = {"name": "star" if case.method == "fedavg" else "ring", "n": case.n(clients)}
    if case.model == "mlp":
        task: dict[str, Any] = {"name": "digits"}
        model: dict[str, Any] = {"name": "mlp", "hidden": [64]}
    else:
        task = {"name": "cifar10", "data_dir": cifar, "num_test": CIFAR_TEST}
        model = {"name": "cnn"}
    return {
        "name": "bench", "seed": 0, "rounds": rounds, "backend": "local",
        "topology": topology,
        "strategy": {"name": case.method, "local_steps": LOCAL_STEPS, "batch_size": BATCH,
                     "lr": LR, "momentum": case.momentum},
        "task": task, "model": model,
        "eval": {"every": 0, "per_client": False},
        "execution": {"mode": mode, "chunk": chunk},
        "tracking": {"out_dir": out_dir, "progress": False, "wandb": {"mode": "disabled"}},
    }


def platform_arm(case: Case, clients: int, mode: str, chunk: int, rounds: int,
                 cifar: str | None, out_dir: str) -> Callable[[int], None]:
    """Round ``r`` of the local backend's engine for the case in ``mode``."""
    from decent.backends.local import local_engine
    from decent.engine.config import from_dict

    engine = local_engine(from_dict(platform_config(case, clients, mode, chunk, rounds,
                                                    cifar, out_dir)))

    def run_round(r: int) -> None:
        engine.run_round(r)

    return run_round


# ---------------------------------------------------------------------- the bare loop
def bare_model(model: str) -> nn.Module:
    if model == "mlp":
        return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    from decent.models.cnn import CNNConfig, build_cnn

    return build_cnn(CNNConfig(), {"image_shape": (3, 32, 32), "num_classes": 10})


class BareLoop:
    """The case's rounds as a plain loop over per-client modules, optimisers and
    generators."""

    def __init__(self, case: Case, clients: int) -> None:
        torch.manual_seed(0)
        self.case = case
        if case.model == "mlp":
            x = torch.rand(DIGITS_TRAIN, 64)
        else:
            x = torch.randn(CIFAR_PER_CLIENT * clients, 3, 32, 32)
        y = torch.randint(10, (len(x),))
        self.shards = [(x[i::clients], y[i::clients]) for i in range(clients)]
        base = bare_model(case.model)
        self.models = [copy.deepcopy(base) for _ in range(clients)]
        self.optimizers = [torch.optim.SGD(m.parameters(), lr=LR, momentum=case.momentum)
                           for m in self.models]
        self.generators = [torch.Generator().manual_seed(i) for i in range(clients)]
        self.server = [p.detach().clone() for p in base.parameters()]  # FedAvg's θ

    def train(self, i: int) -> None:
        model, opt, gen = self.models[i], self.optimizers[i], self.generators[i]
        x, y = self.shards[i]
        for _ in range(LOCAL_STEPS):
            idx = torch.randint(len(y), (BATCH,), generator=gen)
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()

    def __call__(self, r: int) -> None:
        if self.case.method == "fedavg":
            self.fedavg_round()
        else:
            self.dsgd_round()

    def fedavg_round(self) -> None:
        deltas = []
        for i, model in enumerate(self.models):
            with torch.no_grad():
                for p, g in zip(model.parameters(), self.server, strict=True):
                    p.copy_(g)
            self.train(i)
            deltas.append([g - p.detach() for p, g in
                           zip(model.parameters(), self.server, strict=True)])
        with torch.no_grad():
            for k, g in enumerate(self.server):
                g.sub_(sum(d[k] for d in deltas) / len(deltas))

    def dsgd_round(self) -> None:
        n = len(self.models)
        for i in range(n):
            self.train(i)
        with torch.no_grad():
            sent = [[p.detach().clone() for p in m.parameters()] for m in self.models]
            for i, model in enumerate(self.models):
                left, right = sent[(i - 1) % n], sent[(i + 1) % n]
                for k, p in enumerate(model.parameters()):
                    p.copy_((sent[i][k] + left[k] + right[k]) / 3)


def build_arm(arm: str, case: Case, clients: int, chunk: int, rounds: int,
              cifar: str | None, out_dir: str) -> Callable[[int], None]:
    if arm == "bare":
        return BareLoop(case, clients)
    return platform_arm(case, clients, arm, chunk, rounds, cifar, out_dir)


# ---------------------------------------------------------------------- measurements
@dataclass
class Timing:
    case: Case
    clients: int
    seconds: dict[str, list[float]]  # arm → its s/round in each repeat

    def s(self, arm: str) -> float:
        return statistics.median(self.seconds[arm])

    def ratio(self, arm: str, over: str) -> float:
        return statistics.median(a / b for a, b in
                                 zip(self.seconds[arm], self.seconds[over], strict=True))


def time_arms(case: Case, clients: int, repeats: int, rounds: int, chunk: int,
              cifar: str | None) -> Timing:
    """Every arm built side by side, a warm-up round each, then ``repeats`` turns of
    ``rounds`` timed rounds per arm (order rotated each turn)."""
    total = 1 + repeats * rounds
    with tempfile.TemporaryDirectory() as out:
        arms = {arm: build_arm(arm, case, clients, chunk, total, cifar, out) for arm in ARMS}
        next_round = dict.fromkeys(ARMS, 0)
        for arm, step in arms.items():
            step(0)
            next_round[arm] = 1
        seconds: dict[str, list[float]] = {arm: [] for arm in ARMS}
        for k in range(repeats):
            order = ARMS[k % len(ARMS):] + ARMS[:k % len(ARMS)]
            for arm in order:
                times = []
                for _ in range(rounds):
                    started = time.perf_counter()
                    arms[arm](next_round[arm])
                    times.append(time.perf_counter() - started)
                    next_round[arm] += 1
                seconds[arm].append(statistics.median(times))
        del arms
        gc.collect()
    return Timing(case, clients, seconds)


def one_memory(arm: str, case: Case, clients: int, chunk: int, rounds: int,
               cifar: str | None) -> None:
    """In a fresh process: build the arm, run ``rounds`` rounds, print the peak RSS as
    JSON."""
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as out:
        step = build_arm(arm, case, clients, chunk, rounds, cifar, out)
        for r in range(rounds):
            step(r)
    print(json.dumps({"rss_mb": peak_rss_mb()}))


def peak_rss_mb() -> float:
    """This process's peak resident memory: VmHWM, the high-water mark of its own address
    space. (``ru_maxrss`` would not do: Linux carries it over ``fork`` and ``exec``, so a
    child started by a large parent reports the parent's peak.)"""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB; not Linux


def measure_memory(arm: str, case: Case, clients: int, chunk: int, rounds: int,
                   cifar: str | None) -> float:
    cmd = [sys.executable, __file__, "--one", arm, case.key, str(clients),
           "--chunk", str(chunk), "--rounds", str(rounds)]
    if cifar is not None:
        cmd += ["--cifar", cifar]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT).stdout
    return float(json.loads(out.strip().splitlines()[-1])["rss_mb"])


def equivalence(config: Path, out_dir: str) -> dict[str, Any]:
    """The run ``config`` in each mode: its final global-mean-model test metric (accuracy,
    or the loss of a task without one), and the largest |Δθ| between the two runs' final
    client parameters."""
    import numpy as np

    from decent.backends.local import local_engine
    from decent.engine.config import load_config
    from decent.run.runner import run

    got: dict[str, Any] = {}
    for mode in ("sequential", "batched"):
        cfg = load_config(config, [f"execution.mode={mode}", "tracking.progress=false",
                                   "tracking.wandb.mode=disabled",
                                   f"tracking.out_dir={out_dir}"])
        engine = local_engine(cfg)
        started = time.perf_counter()
        result = run(cfg, engine=engine)
        last = result.rows[-1]
        metric = "gmp_accuracy" if "gmp_accuracy" in last else "gmp_loss"
        got[mode] = {"metric": metric, "value": last[metric],
                     "wall": time.perf_counter() - started, "vectors": engine.client_vectors(),
                     "clients": cfg.n, "rounds": cfg.rounds, "strategy": cfg.strategy.name}
    seq, bat = got["sequential"]["vectors"], got["batched"]["vectors"]
    got["max_dtheta"] = max(float(np.max(np.abs(seq[c] - bat[c]))) for c in seq)
    return got


def equivalence_section(say: Report, configs: list[str], out_dir: str) -> None:
    say()
    say("== equivalence on the quick configs, through the runner: final GMP test metric "
        "in each mode, equal to 3 decimals?, largest |Δθ| over every client's final "
        "parameters, wall time")
    for config in configs:
        path = Path(config) if Path(config).is_absolute() else ROOT / config
        eq = equivalence(path, out_dir)
        seq, bat = eq["sequential"], eq["batched"]
        agree = round(seq["value"], 3) == round(bat["value"], 3)
        say(f"{config} ({seq['strategy']}, {seq['clients']} clients, {seq['rounds']} rounds): "
            f"{seq['metric']} sequential {seq['value']:.4f}, batched {bat['value']:.4f}; "
            f"equal to 3 decimals: {'yes' if agree else 'NO'}; max |Δθ| "
            f"{eq['max_dtheta']:.3g}; wall {seq['wall']:.1f} s / {bat['wall']:.1f} s")


# ---------------------------------------------------------------------- language model
LM_BATCH = 4  # prompts per client step
LM_THREADS = 2


LM_TASKS = ("sst2", "lm")  # prompts of varying length; Shakespeare, 64-token sequences


def lm_task(task: str, clients: int, data_dir: str) -> dict[str, Any]:
    if task == "sst2":
        return {"name": "sst2", "data_dir": data_dir, "num_train": 32 * clients,
                "num_val": 0, "num_test": 8, "max_length": 64}
    return {"name": "lm", "corpus": "shakespeare", "seq_len": 64, "max_tokens": 400_000,
            "partition": "contiguous", "max_eval_sequences": 8}


def lm_config(task: str, clients: int, mode: str, data_dir: str, out_dir: str,
              chunk: int) -> Any:
    """LoRA-DSGD on SmolLM2-135M: one local AdamW step of LM_BATCH examples."""
    from decent.engine.config import from_dict

    return from_dict({
        "name": "bench-lm", "seed": 0, "rounds": 1, "torch_threads": LM_THREADS,
        "topology": {"name": "ring" if clients > 2 else "complete", "n": clients},
        "strategy": {"name": "dsgd", "local_steps": 1, "batch_size": LM_BATCH,
                     "optimizer": "adamw", "lr": 1e-3},
        "task": lm_task(task, clients, data_dir),
        "model": {"name": "causal_lm", "path": "smollm2-135m",
                  "lora": {"enabled": True, "r": 8, "alpha": 16, "dropout": 0.0}},
        "execution": {"mode": mode, "chunk": chunk},
        "eval": {"every": 0, "per_client": False},
        "tracking": {"out_dir": out_dir, "progress": False, "wandb": {"mode": "disabled"}},
    })


def lm_group(task: str, clients: int, mode: str, data_dir: str, out_dir: str,
             chunk: int) -> Any:
    from decent.engine.group import ClientGroup
    from decent.engine.plan import build_plan

    cfg = lm_config(task, clients, mode, data_dir, out_dir, chunk)
    return ClientGroup(cfg, list(range(clients)), torch.device("cpu"), build_plan(cfg))


def time_lm(task: str, clients: int, repeats: int, data_dir: str,
            chunk: int) -> dict[str, list[float]]:
    """Seconds of one local phase (every client one step), per arm and repeat (after a
    warm-up phase each), the arms alternating."""
    seconds: dict[str, list[float]] = {"sequential": [], "batched": []}
    with tempfile.TemporaryDirectory() as out:
        groups = {mode: lm_group(task, clients, mode, data_dir, out, chunk)
                  for mode in seconds}
        for group in groups.values():
            group.run_phase(0, 0, "local", {})
        for k in range(repeats):
            for mode in (list(seconds) if k % 2 == 0 else list(reversed(seconds))):
                started = time.perf_counter()
                groups[mode].run_phase(k + 1, 0, "local", {})
                seconds[mode].append(time.perf_counter() - started)
    return seconds


def one_lm_memory(task: str, mode: str, clients: int, data_dir: str, chunk: int) -> None:
    """In a fresh process: build the clients, run two local phases, print the peak RSS."""
    with tempfile.TemporaryDirectory() as out:
        group = lm_group(task, clients, mode, data_dir, out, chunk)
        for r in range(2):
            group.run_phase(r, 0, "local", {})
    print(json.dumps({"rss_mb": peak_rss_mb()}))


def measure_lm_memory(task: str, mode: str, clients: int, data_dir: str, chunk: int) -> float:
    cmd = [sys.executable, __file__, "--one-lm", task, mode, str(clients),
           "--data-dir", data_dir, "--chunk", str(chunk)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT).stdout
    return float(json.loads(out.strip().splitlines()[-1])["rss_mb"])


def lm_section(say: Report, tasks: list[str], sizes: list[int], repeats: int, data_dir: str,
               memory: bool, chunks: list[int]) -> None:
    say()
    say(f"== LoRA-DSGD on SmolLM2-135M (r 8 on q/v), {LM_BATCH} examples per client step, "
        f"{LM_THREADS} torch threads; one local phase (every client one step): median of "
        f"{repeats} alternating repeats after a warm-up phase; peak RSS of a fresh process "
        "per arm (build + 2 phases). sst2: prompts of varying length (a batch is padded to "
        "its longest: each client's alone, a chunk's together); lm: 64-token Shakespeare "
        "sequences; chunk: execution.chunk of the batched arm")
    say(f"{'task':<5} {'clients':>7} {'chunk':>5} {'seq s':>8} {'batch s':>8} {'seq ex/s':>8} "
        f"{'bat ex/s':>8} {'bat÷seq':>8} {'seq MB':>8} {'batch MB':>8} {'mem ratio':>9}  "
        "target")
    for task in tasks:
        for n in sizes:
            for chunk in (chunks if n > min(chunks) else chunks[:1]):
                sec = time_lm(task, n, repeats, data_dir, chunk)
                gain = statistics.median(s / b for s, b in zip(
                    sec["sequential"], sec["batched"], strict=True))
                seq_s = statistics.median(sec["sequential"])
                bat_s = statistics.median(sec["batched"])
                examples = n * LM_BATCH
                mb = {m: measure_lm_memory(task, m, n, data_dir, chunk) if memory
                      else float("nan") for m in ("sequential", "batched")}
                target = f"≥1.2: {'met' if gain >= 1.2 else 'NOT met'}" if n == 16 else ""
                say(f"{task:<5} {n:>7} {chunk:>5} {seq_s:>8.2f} {bat_s:>8.2f} "
                    f"{examples / seq_s:>8.2f} {examples / bat_s:>8.2f} {gain:>8.2f} "
                    f"{mb['sequential']:>8.0f} {mb['batched']:>8.0f} "
                    f"{mb['batched'] / mb['sequential']:>9.2f}  {target}")


# ---------------------------------------------------------------------- report
class Report:
    """Prints each line as it comes and keeps it for the result file."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, line: str = "") -> None:
        print(line, flush=True)
        self.lines.append(line)


def verdict(value: float, limit: float) -> str:
    return f"≤{limit:g}: {'met' if value <= limit else 'NOT met'}"


def speed_table(say: Report, timings: list[Timing]) -> None:
    say(f"{'workload':<18} {'clients':>7} {'bare s':>8} {'seq s':>8} {'batch s':>8} "
        f"{'seq÷bare':>8} {'bat÷bare':>8} {'bat÷seq':>8}  target (batched÷bare)")
    for t in timings:
        ratio = t.ratio("batched", "bare")
        limit = SPEED_TARGETS.get((t.case.model, t.clients))
        target = verdict(ratio, limit) if limit is not None else ""
        say(f"{t.case.label:<18} {t.clients:>7} {t.s('bare'):>8.4f} {t.s('sequential'):>8.4f} "
            f"{t.s('batched'):>8.4f} {t.ratio('sequential', 'bare'):>8.2f} {ratio:>8.2f} "
            f"{t.ratio('batched', 'sequential'):>8.2f}  {target}")


def git_describe() -> str:
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT,
                              check=True, capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, nargs="*", default=[16, 64, 256, 1024],
                   help="training clients of the MLP workloads")
    p.add_argument("--momentum-clients", type=int, nargs="*", default=[64],
                   help="sizes of the DSGD MLP run with momentum 0.9")
    p.add_argument("--cnn-clients", type=int, nargs="*", default=[16, 64])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rounds", type=int, default=5, help="timed MLP rounds per arm and repeat")
    p.add_argument("--cnn-rounds", type=int, default=1,
                   help="timed CNN rounds per arm and repeat")
    p.add_argument("--chunk", type=int, default=256, help="execution.chunk of the batched arm")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory runs")
    p.add_argument("--equivalence", nargs="*", default=QUICK_CONFIGS,
                   help="configs run in both modes (none: skip)")
    p.add_argument("--out", default=str(RESULT), help="result file ('-': none)")
    p.add_argument("--lm-clients", type=int, nargs="*", default=[1, 4, 16],
                   help="clients of the SmolLM2 LoRA workload (none: skip it)")
    p.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"),
                   help="a folder with sst2/train.jsonl (the SmolLM2 workload)")
    p.add_argument("--lm-tasks", nargs="*", default=list(LM_TASKS), choices=LM_TASKS)
    p.add_argument("--lm-chunks", type=int, nargs="+", default=[256, 4],
                   help="execution.chunk values of the SmolLM2 batched arm")
    p.add_argument("--one-lm", nargs=3, metavar=("TASK", "MODE", "CLIENTS"),
                   help=argparse.SUPPRESS)
    p.add_argument("--cifar", help=argparse.SUPPRESS)
    p.add_argument("--one", nargs=3, metavar=("ARM", "CASE", "CLIENTS"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one_lm:
        one_lm_memory(args.one_lm[0], args.one_lm[1], int(args.one_lm[2]), args.data_dir,
                      args.chunk)
        return
    torch.set_num_threads(1)
    if args.one:
        one_memory(args.one[0], CASES[args.one[1]], int(args.one[2]), args.chunk,
                   args.rounds, args.cifar)
        return

    started = time.perf_counter()
    say = Report()
    argv = " ".join(shlex.quote(a) for a in sys.argv[1:])
    say(f"# python benchmarks/batched_clients.py {argv}".rstrip() +
        f"  ({datetime.date.today()}, {os.cpu_count()} cores, {platform.machine()} CPU, "
        f"torch {torch.__version__}, 1 torch thread, {git_describe()})")
    say(f"H={LOCAL_STEPS} local steps, batch {BATCH}, SGD lr {LR}; execution.chunk "
        f"{args.chunk}; s/round: engine.run_round (all phases, eval off) or one pass of the "
        f"bare loop; medians of {args.repeats} alternating repeats")

    mlp_work = [(CASES["fedavg-mlp"], n) for n in args.clients]
    mlp_work += [(CASES["dsgd-mlp"], n) for n in args.clients]
    mlp_work += [(CASES["dsgd-mlp-m"], n) for n in args.momentum_clients]
    cnn_work = [(CASES["dsgd-cnn"], n) for n in args.cnn_clients]
    with tempfile.TemporaryDirectory() as tmp:
        cifar = None
        if cnn_work:
            cifar = str(Path(tmp) / "cifar10")
            import datasets

            from decent.tasks.cifar10 import write_random_cifar10

            datasets.disable_progress_bars()
            write_random_cifar10(Path(cifar), CIFAR_PER_CLIENT * max(args.cnn_clients),
                                 CIFAR_TEST)

        if args.equivalence:
            equivalence_section(say, args.equivalence, str(Path(tmp) / "runs"))

        timings = []
        if mlp_work:
            say()
            say(f"== MLP 64→64→10 on digits; s/round: median of {args.rounds} rounds per "
                "repeat after one warm-up round")
            for case, n in mlp_work:
                timings.append(time_arms(case, n, args.repeats, args.rounds, args.chunk, None))
            speed_table(say, timings[-len(mlp_work):])
        if cnn_work:
            say()
            say(f"== CIFAR-10 CNN (32/64 channels, hidden 512) on random 3×32×32 images, DSGD "
                f"ring; s/round: median of {args.cnn_rounds} round(s) per repeat after one "
                "warm-up round")
            for case, n in cnn_work:
                timings.append(time_arms(case, n, args.repeats, args.cnn_rounds, args.chunk,
                                         cifar))
            speed_table(say, timings[-len(cnn_work):])

        if not args.no_memory:
            say()
            say(f"== peak RSS (VmHWM of a fresh process per arm: build, then {args.rounds} "
                f"rounds of an MLP, {args.cnn_rounds} of the CNN)")
            say(f"{'workload':<18} {'clients':>7} {'bare MB':>8} {'seq MB':>8} {'batch MB':>8} "
                f"{'bat÷seq':>8}  target")
            for case, n in mlp_work + cnn_work:
                cnn = case.model == "cnn"
                mb = {arm: measure_memory(arm, case, n, args.chunk,
                                          args.cnn_rounds if cnn else args.rounds,
                                          cifar if cnn else None)
                      for arm in ARMS}
                ratio = mb["batched"] / mb["sequential"]
                say(f"{case.label:<18} {n:>7} {mb['bare']:>8.0f} {mb['sequential']:>8.0f} "
                    f"{mb['batched']:>8.0f} {ratio:>8.2f}  {verdict(ratio, MEMORY_TARGET)}")
    tasks = list(args.lm_tasks)
    if "sst2" in tasks and not (Path(args.data_dir) / "sst2" / "train.jsonl").is_file():
        tasks.remove("sst2")
        say()
        say(f"== SmolLM2 on sst2 skipped: no sst2/train.jsonl under {args.data_dir} "
            "(--data-dir)")
    if args.lm_clients and tasks:
        lm_section(say, tasks, args.lm_clients, args.repeats, args.data_dir, not args.no_memory,
                   args.lm_chunks)
        torch.set_num_threads(1)
    say()
    say(f"total wall time {time.perf_counter() - started:.0f} s")
    if args.out != "-":
        Path(args.out).write_text("\n".join(say.lines) + "\n")


if __name__ == "__main__":
    main()
