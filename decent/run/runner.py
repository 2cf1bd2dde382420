"""One run from a validated config to its run directory.

Order matters for "nothing half-written": the config, topology and strategy are checked
(the plan is built once, here), then the backend builds every client (data and models
loaded, actors started), and only then is the run directory created."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from tqdm import tqdm

from decent.core.errors import ActorLost, ConfigError
from decent.core.stats import Stat, pooled_over_rounds, reduce_stats
from decent.engine.config import RunConfig, load_config, to_yaml
from decent.engine.evaluation import evaluated_metrics, lower_is_better
from decent.engine.plan import RunPlan, build_plan
from decent.network.router import RoundTraffic
from decent.run import checkpoint
from decent.run.rundir import RunDir, check_out_dir
from decent.run.tracking import Tracker


class Backend(Protocol):
    max_edge_bytes_total: int
    layout: dict[str, Any]  # how the run is laid out (Ray: actors), for the summary
    compute_charge: dict[str, Any]  # the FLOPs per step the clock charged, for the summary

    def run_round(self, round_: int) -> tuple[dict[int, dict[str, Stat]], RoundTraffic]: ...
    def present(self, round_: int) -> list[int] | None: ...
    def edge_bytes_total(self) -> dict[tuple[int, int], int]: ...
    def evaluate(self, per_client: bool, present: list[int] | None = None
                 ) -> dict[str, float]: ...
    def save_state(self) -> dict[str, Any]: ...
    def load_state(self, state: dict[str, Any]) -> None: ...
    def client_vectors(self) -> dict[int, np.ndarray]: ...
    def close(self) -> None: ...


@dataclass
class RunResult:
    run_dir: Path
    summary: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)


def check(cfg: RunConfig) -> RunPlan:
    """Checks that need more than the config's own fields — the topology exists and is
    connected, the method accepts it, the device exists, the output folder is writable —
    and the plan they built."""
    plan = build_plan(cfg)
    if cfg.backend == "local" and cfg.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ConfigError("device", "cuda was asked for but this machine has no CUDA "
                              "device torch can use; set device=cpu (or auto)")
    if cfg.backend == "ray" and cfg.device == "cuda" and cfg.ray.num_gpus_per_actor <= 0:
        raise ConfigError("device", "device=cuda on backend=ray needs GPUs for the actors: "
                          "set ray.num_gpus_per_actor (e.g. 0.25), or device=auto")
    check_target(cfg)
    check_out_dir(cfg.tracking.out_dir)
    return plan


def check_target(cfg: RunConfig) -> None:
    metric = cfg.eval.target.metric
    if metric is None:
        return
    from decent.tasks.registry import TASKS

    known = evaluated_metrics(TASKS.entry(cfg.task.name).build.METRICS, cfg.eval.per_client)
    if metric not in known:
        raise ConfigError("eval.target.metric", f"{metric!r} is not reported by task "
                          f"'{cfg.task.name}'; choose one of: {', '.join(known)}")


def target_reached(cfg: RunConfig, row: dict[str, Any]) -> bool:
    target = cfg.eval.target
    if target.metric is None or target.metric not in row:
        return False
    lower = target.mode == "min" or (target.mode == "auto" and lower_is_better(target.metric))
    value = row[target.metric]
    return value <= target.value if lower else value >= target.value


def make_backend(cfg: RunConfig, plan: RunPlan | None = None) -> Backend:
    if cfg.backend == "ray":
        from decent.backends.ray.executor import RayBackend

        return RayBackend(cfg, plan)
    from decent.backends.local import LocalBackend

    return LocalBackend(cfg, plan)


def eval_due(cfg: RunConfig, round_: int) -> bool:
    last = round_ == cfg.rounds - 1
    return last or (cfg.eval.every > 0 and (round_ + 1) % cfg.eval.every == 0)


class Slot:
    """The backend in use: replaced when a run restarts from its checkpoint."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def close(self) -> None:
        self.backend.close()


def run(cfg: RunConfig, backend: Backend | None = None) -> RunResult:
    plan = check(cfg)
    slot = Slot(backend or make_backend(cfg, plan))
    try:
        with RunDir(cfg.tracking.out_dir, cfg.name) as rd:
            rd.write_text("config.yaml", to_yaml(cfg))
            return _rounds(cfg, slot, plan, rd, start=0, rows=[], wandb_id=None)
    finally:
        slot.close()


def resume(run_dir: str | Path, backend: Backend | None = None) -> RunResult:
    """Continue the run in ``run_dir`` from its last checkpoint: its metrics and final
    state are those of the run had it never stopped."""
    rd = RunDir.existing(Path(run_dir))
    info = checkpoint.pointer(rd.path)
    cfg = load_config(rd.path / "config.yaml")
    plan = check(cfg)
    slot = Slot(backend or make_backend(cfg, plan))
    try:
        rows = rewind(rd, slot.backend, info)
        with rd:
            return _rounds(cfg, slot, plan, rd, start=info["round"], rows=rows,
                           wandb_id=info.get("wandb_id"))
    finally:
        slot.close()


def rewind(rd: RunDir, backend: Backend, info: dict[str, Any]) -> list[dict[str, Any]]:
    """Load the checkpoint ``info`` into ``backend``; the rows up to it (those logged
    after it, before the run stopped, are dropped: they are run again)."""
    backend.load_state(checkpoint.read(rd.path, info))
    rows = [row for row in read_rows(rd.path / "metrics.jsonl") if row["round"] < info["round"]]
    rd.write_text("metrics.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    return rows


def read_rows(path: Path) -> list[dict[str, Any]]:
    rows = []
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            rows.append(json.loads(line))
        except ValueError:  # a line cut short when the run was killed
            break
    return rows


def _rounds(cfg: RunConfig, slot: Slot, plan: RunPlan, rd: RunDir, start: int,
            rows: list[dict[str, Any]], wandb_id: str | None) -> RunResult:
    rows = list(rows)
    tracker = Tracker(cfg, rd.path, rd.run_id, wandb_id)
    summary: dict[str, Any] | None = None
    every = cfg.checkpoint.every
    restarts = 0
    try:
        started = time.perf_counter()
        initial = initial_metrics(cfg, slot.backend, rd, start)
        bar = tqdm(total=cfg.rounds, initial=start, desc=cfg.name, unit="round",
                   disable=not cfg.tracking.progress, dynamic_ncols=True)
        r = start
        while r < cfg.rounds:
            backend = slot.backend
            bytes_total = rows[-1]["bytes_total"] if rows else 0
            sim_total = rows[-1]["sim_time_total_s"] if rows else 0.0
            t0 = time.perf_counter()
            try:
                stats, traffic = backend.run_round(r)
            except ActorLost as lost:
                restarts += 1
                if restarts > cfg.ray.max_restarts:
                    raise ConfigError("ray.max_restarts", f"{lost}; restarted "
                                      f"{cfg.ray.max_restarts} times already") from None
                slot.backend.close()
                slot.backend = make_backend(cfg, plan)
                # no checkpoint yet: from the start
                info = checkpoint.pointer(rd.path) if (rd.path / checkpoint.POINTER).is_file() \
                    else None
                if info:
                    rows = rewind(rd, slot.backend, info)
                else:
                    rows = []
                    rd.write_text("metrics.jsonl", "")
                tracker.reopen()
                r = info["round"] if info else 0
                bar.n = r
                continue
            wall = time.perf_counter() - t0
            bytes_total += traffic.bytes
            sim_total += traffic.sim_time_s
            row: dict[str, Any] = {
                "round": r,
                **reduce_stats(stats),
                "bytes": traffic.bytes,
                "bytes_total": bytes_total,
                "messages": traffic.messages,
                "max_edge_bytes": traffic.max_edge_bytes,
                "max_edge_bytes_total": backend.max_edge_bytes_total,
                "sim_time_s": traffic.sim_time_s,
                "sim_compute_s": traffic.sim_compute_s,
                "sim_comm_s": traffic.sim_comm_s,
                "sim_time_total_s": sim_total,
                "wall_s": wall,
            }
            if cfg.faults.on_the_wire:
                row.update(dropped_messages=traffic.dropped_messages,
                           delayed_messages=traffic.delayed_messages,
                           partitioned_messages=traffic.partitioned_messages)
            present = backend.present(r)
            if present is not None:
                row.update(live_clients=len(present),
                           undeliverable_messages=traffic.undeliverable_messages)
            if eval_due(cfg, r):
                row.update(backend.evaluate(cfg.eval.per_client, present))
            rows.append(row)
            tracker.log(row)
            if every and (r + 1) % every == 0 and r + 1 < cfg.rounds:
                checkpoint.write(rd.path, r + 1, backend.save_state(),
                                 {"wandb_id": tracker.wandb_id})
            shown = ("loss", "gmp_accuracy", "gmp_perplexity")
            bar.update(1)
            bar.set_postfix({k: f"{row[k]:.4g}" for k in shown if k in row})
            r += 1
        bar.close()
        summary = summarize(cfg, rows, time.perf_counter() - started, rd.run_id)
        summary.update({f"initial_{k}": v for k, v in initial.items()
                        if k.startswith(("gmp_", "client_", "consensus"))})
        if cfg.faults.on_the_wire:
            for key in ("dropped_messages", "delayed_messages", "partitioned_messages"):
                summary[f"{key}_total"] = sum(r[key] for r in rows)
        if "live_clients" in rows[-1]:
            summary["live_clients"] = rows[-1]["live_clients"]
            summary["undeliverable_messages_total"] = sum(
                r.get("undeliverable_messages", 0) for r in rows)
        summary.update(slot.backend.layout)
        summary.update(slot.backend.compute_charge)
        if plan.byzantine:
            summary["byzantine_clients"] = plan.byzantine
            summary["attack"] = cfg.faults.attack.name
        if plan.topology.assignment is not None:  # two_tier: each worker's aggregator
            summary["aggregator_of"] = {str(w): a for w, a in plan.topology.assignment.items()}
        # bytes per directed edge over the run, for `decent report`'s heat map
        rd.write_json("edges.json", {f"{i}-{j}": b for (i, j), b in
                                     sorted(slot.backend.edge_bytes_total().items())})
        rd.write_json("summary.json", summary)
    finally:
        tracker.close(summary)
    return RunResult(rd.final, summary, rows)


def initial_metrics(cfg: RunConfig, backend: Backend, rd: RunDir, start: int
                    ) -> dict[str, Any]:
    """With ``eval.initial``, the metrics of the starting model (evaluated once, before
    round 0, and kept in ``initial.json`` so that a resumed run reports them too)."""
    if not cfg.eval.initial:
        return {}
    path = rd.path / "initial.json"
    if start > 0:  # resumed: the starting model is gone, its metrics were kept
        return json.loads(path.read_text()) if path.is_file() else {}
    metrics = backend.evaluate(cfg.eval.per_client, backend.present(0))
    rd.write_json("initial.json", metrics)
    return metrics


def summarize(cfg: RunConfig, rows: list[dict[str, Any]], wall: float, run_id: str) -> dict:
    last_eval = next(r for r in reversed(rows) if "consensus_distance" in r)
    summary = {
        "run_id": run_id,
        "name": cfg.name,
        "strategy": cfg.strategy.name,
        "topology": cfg.topology.name,
        "clients": cfg.n,
        "backend": cfg.backend,
        "rounds": cfg.rounds,
        "wall_s": wall,
        "bytes_total": rows[-1]["bytes_total"],
        "max_edge_bytes_total": rows[-1]["max_edge_bytes_total"],
        "sim_time_total_s": rows[-1]["sim_time_total_s"],
        "sim_compute_total_s": sum(r["sim_compute_s"] for r in rows),
        "sim_comm_total_s": sum(r["sim_comm_s"] for r in rows),
    }
    if cfg.eval.target.metric is not None:
        # the first evaluated round at which the target holds, on the simulated clock
        hit = next((r for r in rows if target_reached(cfg, r)), None)
        summary["target"] = {"metric": cfg.eval.target.metric, "value": cfg.eval.target.value}
        summary["time_to_target_s"] = None if hit is None else hit["sim_time_total_s"]
        summary["rounds_to_target"] = None if hit is None else hit["round"] + 1
    if "loss" in rows[-1]:
        summary["final_loss"] = rows[-1]["loss"]
    summary.update(pooled_over_rounds(rows))
    summary.update({k: v for k, v in last_eval.items()
                    if k.startswith(("gmp_", "client_", "consensus"))})
    return summary
