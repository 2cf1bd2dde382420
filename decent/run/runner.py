"""One run from a validated config to its run directory.

Order matters for "nothing half-written": the config, topology and strategy are checked
(the plan is built once, here), then the backend builds every client (data and models
loaded, actors started), and only then is the run directory created."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from decent.core.errors import ActorLost, ConfigError
from decent.core.stats import reduce_stats
from decent.engine.config import RunConfig, load_config, to_yaml
from decent.engine.evaluation import evaluated_metrics
from decent.engine.loop import Engine
from decent.engine.plan import RunPlan, build_plan
from decent.run import checkpoint
from decent.run.rundir import RunDir, check_out_dir
from decent.run.summary import summarize
from decent.run.tracking import Tracker


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


def make_engine(cfg: RunConfig, plan: RunPlan) -> Engine:
    """The engine of ``cfg`` over its backend's executor (Ray's only imported for Ray)."""
    if cfg.backend == "ray":
        from decent.backends.ray.executor import RayActors

        return Engine(cfg, plan, RayActors(cfg, plan))
    from decent.backends.local import InProcess

    return Engine(cfg, plan, InProcess(cfg, plan))


def eval_due(cfg: RunConfig, round_: int) -> bool:
    last = round_ == cfg.rounds - 1
    return last or (cfg.eval.every > 0 and (round_ + 1) % cfg.eval.every == 0)


class Slot:
    """The engine in use: replaced when a run restarts from its checkpoint."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def close(self) -> None:
        self.engine.close()


def run(cfg: RunConfig, engine: Engine | None = None) -> RunResult:
    """Run ``cfg`` (on ``engine``, e.g. a wrapped one in a test; default: the engine of
    its backend) into a new run directory."""
    plan = check(cfg)
    slot = Slot(engine or make_engine(cfg, plan))
    try:
        with RunDir(cfg.tracking.out_dir, cfg.name) as rd:
            rd.write_text("config.yaml", to_yaml(cfg))
            return _rounds(cfg, slot, plan, rd, start=0, rows=[], wandb_id=None)
    finally:
        slot.close()


def resume(run_dir: str | Path, engine: Engine | None = None) -> RunResult:
    """Continue the run in ``run_dir`` from its last checkpoint: its metrics and final
    state are those of the run had it never stopped."""
    rd = RunDir.existing(Path(run_dir))
    info = checkpoint.pointer(rd.path)
    cfg = load_config(rd.path / "config.yaml")
    plan = check(cfg)
    slot = Slot(engine or make_engine(cfg, plan))
    try:
        rows = rewind(rd, slot.engine, info)
        with rd:
            return _rounds(cfg, slot, plan, rd, start=info["round"], rows=rows,
                           wandb_id=info.get("wandb_id"))
    finally:
        slot.close()


def rewind(rd: RunDir, engine: Engine, info: dict[str, Any]) -> list[dict[str, Any]]:
    """Load the checkpoint ``info`` into ``engine``; the rows up to it (those logged
    after it, before the run stopped, are dropped: they are run again)."""
    engine.load_state(checkpoint.read(rd.path, info))
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
        initial = initial_metrics(cfg, slot.engine, rd, start)
        bar = tqdm(total=cfg.rounds, initial=start, desc=cfg.name, unit="round",
                   disable=not cfg.tracking.progress, dynamic_ncols=True)
        r = start
        while r < cfg.rounds:
            engine = slot.engine
            bytes_total = rows[-1]["bytes_total"] if rows else 0
            sim_total = rows[-1]["sim_time_total_s"] if rows else 0.0
            t0 = time.perf_counter()
            try:
                stats, traffic = engine.run_round(r)
            except ActorLost as lost:
                restarts += 1
                if restarts > cfg.ray.max_restarts:
                    raise ConfigError("ray.max_restarts", f"{lost}; restarted "
                                      f"{cfg.ray.max_restarts} times already") from None
                slot.engine.close()
                slot.engine = make_engine(cfg, plan)
                # no checkpoint yet: from the start
                info = checkpoint.pointer(rd.path) if (rd.path / checkpoint.POINTER).is_file() \
                    else None
                if info:
                    rows = rewind(rd, slot.engine, info)
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
                "max_edge_bytes_total": engine.max_edge_bytes_total,
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
            present = engine.present(r)
            if present is not None:
                row.update(live_clients=len(present),
                           undeliverable_messages=traffic.undeliverable_messages)
            if eval_due(cfg, r):
                row.update(engine.evaluate(cfg.eval.per_client, present))
            rows.append(row)
            tracker.log(row)
            if every and (r + 1) % every == 0 and r + 1 < cfg.rounds:
                checkpoint.write(rd.path, r + 1, engine.save_state(),
                                 {"wandb_id": tracker.wandb_id})
            shown = ("loss", "gmp_accuracy", "gmp_perplexity")
            bar.update(1)
            bar.set_postfix({k: f"{row[k]:.4g}" for k in shown if k in row})
            r += 1
        bar.close()
        summary = summarize(cfg, plan, slot.engine, rows, initial,
                            time.perf_counter() - started, rd.run_id)
        # bytes per directed edge over the run, for `decent report`'s heat map
        rd.write_json("edges.json", {f"{i}-{j}": b for (i, j), b in
                                     sorted(slot.engine.edge_bytes_total().items())})
        rd.write_json("summary.json", summary)
    finally:
        tracker.close(summary)
    return RunResult(rd.final, summary, rows)


def initial_metrics(cfg: RunConfig, engine: Engine, rd: RunDir, start: int
                    ) -> dict[str, Any]:
    """With ``eval.initial``, the metrics of the starting model (evaluated once, before
    round 0, and kept in ``initial.json`` so that a resumed run reports them too)."""
    if not cfg.eval.initial:
        return {}
    path = rd.path / "initial.json"
    if start > 0:  # resumed: the starting model is gone, its metrics were kept
        return json.loads(path.read_text()) if path.is_file() else {}
    metrics = engine.evaluate(cfg.eval.per_client, engine.present(0))
    rd.write_json("initial.json", metrics)
    return metrics
