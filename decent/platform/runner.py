"""One run from a validated config to its run directory.

Order matters for "nothing half-written": the config, topology and strategy are checked
(the plan is built once, here), then the backend builds every client (data and models
loaded, actors started), and only then is the run directory created."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from tqdm import tqdm

from decent.core.errors import ConfigError
from decent.core.stats import Stat, reduce_stats
from decent.network.router import RoundTraffic
from decent.platform.config import RunConfig, to_yaml
from decent.platform.evaluation import evaluated_metrics, lower_is_better
from decent.platform.plan import RunPlan, build_plan
from decent.platform.rundir import RunDir, check_out_dir
from decent.platform.tracking import Tracker


class Backend(Protocol):
    max_edge_bytes_total: int

    def run_round(self, round_: int) -> tuple[dict[int, dict[str, Stat]], RoundTraffic]: ...
    def evaluate(self, per_client: bool) -> dict[str, float]: ...
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
        from decent.platform.ray_backend.backend import RayBackend

        return RayBackend(cfg, plan)
    from decent.platform.local_backend import LocalBackend

    return LocalBackend(cfg, plan)


def eval_due(cfg: RunConfig, round_: int) -> bool:
    last = round_ == cfg.rounds - 1
    return last or (cfg.eval.every > 0 and (round_ + 1) % cfg.eval.every == 0)


def run(cfg: RunConfig, backend: Backend | None = None) -> RunResult:
    plan = check(cfg)
    backend = backend or make_backend(cfg, plan)
    try:
        return _run(cfg, backend, plan)
    finally:
        backend.close()


def _run(cfg: RunConfig, backend: Backend, plan: RunPlan) -> RunResult:
    rows: list[dict[str, Any]] = []
    with RunDir(cfg.tracking.out_dir, cfg.name) as rd:
        rd.write_text("config.yaml", to_yaml(cfg))
        tracker = Tracker(cfg, rd.path, rd.run_id)
        summary: dict[str, Any] | None = None
        try:
            bytes_total, sim_total, started = 0, 0.0, time.perf_counter()
            bar = tqdm(range(cfg.rounds), desc=cfg.name, disable=not cfg.tracking.progress,
                       unit="round", dynamic_ncols=True)
            for r in bar:
                t0 = time.perf_counter()
                stats, traffic = backend.run_round(r)
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
                if eval_due(cfg, r):
                    row.update(backend.evaluate(cfg.eval.per_client))
                rows.append(row)
                tracker.log(row)
                shown = ("loss", "gmp_accuracy", "gmp_perplexity")
                bar.set_postfix({k: f"{row[k]:.4g}" for k in shown if k in row})
            summary = summarize(cfg, rows, time.perf_counter() - started, rd.run_id)
            if cfg.faults.on_the_wire:
                for key in ("dropped_messages", "delayed_messages", "partitioned_messages"):
                    summary[f"{key}_total"] = sum(r[key] for r in rows)
            if plan.byzantine:
                summary["byzantine_clients"] = plan.byzantine
                summary["attack"] = cfg.faults.attack.name
            rd.write_json("summary.json", summary)
        finally:
            tracker.close(summary)
    return RunResult(rd.path, summary, rows)


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
    summary.update({k: v for k, v in last_eval.items()
                    if k.startswith(("gmp_", "client_", "consensus"))})
    return summary
