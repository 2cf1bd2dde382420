"""One run from a validated config to its run directory.

Order matters for "nothing half-written": the config, topology and strategy are checked
(the plan is built once, here), then the backend builds every client (data and models
loaded, actors started), and only then is the run directory created."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from decent.core.errors import ActorLost, ConfigError, PhaseError
from decent.core.stats import reduce_stats
from decent.engine.config import RunConfig, to_yaml
from decent.engine.evaluation import evaluated_metrics
from decent.engine.executor import executor_spec
from decent.engine.group import resolve_device
from decent.engine.loop import Engine
from decent.engine.plan import RunPlan, build_plan
from decent.engine.saved import load_saved_config
from decent.run import checkpoint, environment, stops
from decent.run.rundir import RunDir, Segments, check_out_dir
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
    executor_spec(cfg.backend).check_device(cfg)
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
    """The engine of ``cfg`` over the executor ``backend`` names (Ray's only imported for
    Ray)."""
    return Engine(cfg, plan, executor_spec(cfg.backend).start(cfg, plan))


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
    rounds = starting(lambda: Rounds(cfg, plan, engine), cfg)
    rd = RunDir(cfg.tracking.out_dir, cfg.name)

    def body() -> RunResult:
        rd.write_text("config.yaml", to_yaml(cfg))
        return rounds.run(rd, start=0, rows=[], wandb_id=None)

    return within(rd, rounds, body)


def resume(run_dir: str | Path, engine: Engine | None = None,
           from_previous: bool = False, trust_imports: bool = False) -> RunResult:
    """Continue the run in ``run_dir`` from its last checkpoint (with ``from_previous``:
    the newest one that verifies): its metrics and final state are those of the run had
    it never stopped. Everything is verified before anything on disk changes. A run that
    Ctrl-C stopped before its first checkpoint runs again from round 0."""
    rd = RunDir.existing(Path(run_dir))
    chosen: checkpoint.Committed | None = None
    info: dict[str, Any] = {}
    if not stops.from_round_zero(rd.path):
        chosen, info = checkpoint.select(rd.path, from_previous)
    cfg = load_saved_config(rd.path / "config.yaml", trust_imports)
    plan = check(cfg)
    rounds = starting(lambda: Rounds(cfg, plan, engine), cfg, rd.path)

    def body() -> RunResult:
        rows = rounds.go_back(rd, chosen)
        stops.resumed(rd)
        return rounds.run(rd, start=0 if chosen is None else chosen.next_round, rows=rows,
                          wandb_id=info.get("wandb_id"))

    return within(rd, rounds, body)


def starting(build: Callable[[], Rounds], cfg: RunConfig, resuming: Path | None = None
             ) -> Rounds:
    """``build()``: the engine, built before any run directory is written (data loaded,
    Ray started). Ctrl-C there says that nothing was written (or ``resuming`` is as it
    was)."""
    try:
        return build()
    except KeyboardInterrupt:
        raise stops.before_start(cfg, resuming) from None


def within(rd: RunDir, rounds: Rounds, body: Callable[[], RunResult]) -> RunResult:
    """``body()`` with ``rd`` open; the engine closed after it, however it ends. Ctrl-C
    leaves ``rd`` resumable and says where it stopped (:func:`stops.interrupted`); a
    strategy's own error leaves its traceback in the failed directory's ``error.log``."""
    try:
        with rd:
            try:
                return body()
            except KeyboardInterrupt as exc:
                raise stops.interrupted(rd, rounds.at, rounds.cfg, exc) from None
    except PhaseError as exc:
        stops.log_error(rd.path, exc)  # rd.path: the <id>.failed directory by now
        raise
    finally:
        rounds.close()


def rewind(rd: RunDir, engine: Engine, chosen: checkpoint.Committed) -> list[dict[str, Any]]:
    """Load the checkpoint ``chosen`` into ``engine``; the rows up to it (those logged
    after it, before the run stopped, are cut off: they are run again)."""
    engine.load_state(checkpoint.read(chosen))
    kept = b"".join(checkpoint.whole_rows(rd.path / checkpoint.METRICS)[:chosen.metric_rows])
    rd.write_bytes(checkpoint.METRICS, kept)  # the same bytes: the manifest's hash holds
    return [json.loads(line) for line in kept.splitlines()]


class Rounds:
    """The rounds of one segment of a run (one process from start or resume to its end):
    the engine in use, the rows, and the restarts after an actor was lost."""

    def __init__(self, cfg: RunConfig, plan: RunPlan, engine: Engine | None) -> None:
        self.cfg, self.plan = cfg, plan
        self.at = 0  # the round running, or the next to run (what Ctrl-C reports)
        self.restarts = 0
        self.losses: list[dict[str, Any]] = []  # the actor losses that restarted the run
        self.cross_node_before = 0  # bytes between nodes sent by engines a restart replaced
        self.slot: Slot | None = None
        if engine is not None:
            self.slot = Slot(engine)
        else:
            self.slot = Slot(self.build())

    def build(self) -> Engine:
        """A new engine; an actor lost while it starts is a restart like any other."""
        while True:
            try:
                return make_engine(self.cfg, self.plan)
            except ActorLost as lost:
                self.count_restart(str(lost), "starting its actors again")

    def count_restart(self, cause: str, then: str) -> None:
        """One restart more, said in one line (``cause``; ``then``: what it does now); one
        line naming ray.max_restarts when there were too many."""
        self.restarts += 1
        spec = executor_spec(self.cfg.backend)
        most = spec.loss_policy(self.cfg).max_restarts
        if self.restarts > most:
            raise ConfigError(f"{spec.section or 'backend'}.max_restarts", f"{cause}; "
                              f"restarted {most} times already") from None
        print(f"restart {self.restarts} of at most {most}: {cause}; "
              f"{then}", flush=True)

    def go_back(self, rd: RunDir, chosen: checkpoint.Committed | None,
                ) -> list[dict[str, Any]]:
        """Load ``chosen`` (None: the start) into the engine, rebuilding it whenever an
        actor is lost on the way; the rows before it."""
        assert self.slot is not None
        while True:
            try:
                if chosen is None:
                    rd.write_text(checkpoint.METRICS, "")
                    return []
                return rewind(rd, self.slot.engine, chosen)
            except ActorLost as lost:
                self.count_restart(f"{lost} (while its checkpoint loaded)",
                                   "loading it again on new actors")
                self.slot.close()
                self.slot.engine = self.build()

    def restart(self, rd: RunDir, round_: int, cause: ActorLost) -> tuple[int, list]:
        """Back to the last committed checkpoint (or the start) on a new engine: the round
        to run next and the rows before it. Said in one line."""
        assert self.slot is not None
        chosen = (checkpoint.select(rd.path, say=lambda _: None)[0]
                  if (rd.path / checkpoint.POINTER).is_file() else None)
        where = "the start" if chosen is None else f"{chosen.dir.name}"
        self.count_restart(f"round {round_}: {cause}", f"back to {where}")
        if cause.loss is not None:
            self.losses.append(cause.loss)
        # what crossed between nodes before the restart crossed for real (rounds run again
        # cross again)
        self.cross_node_before += self.slot.engine.bytes_cross_node
        self.slot.close()
        self.slot.engine = self.build()
        rows = self.go_back(rd, chosen)
        return (0 if chosen is None else chosen.next_round), rows

    def close(self) -> None:
        if self.slot is not None:
            self.slot.close()

    def run(self, rd: RunDir, start: int, rows: list[dict[str, Any]],
            wandb_id: str | None) -> RunResult:
        cfg, plan = self.cfg, self.plan
        assert self.slot is not None
        slot = self.slot
        rows = list(rows)
        tracker = Tracker(cfg, rd.path, rd.run_id, wandb_id)
        segment = Segments(rd, start, environment.describe(
            cfg.torch_threads, resolve_device(cfg).type))
        summary: dict[str, Any] | None = None
        every = cfg.checkpoint.every
        self.at = start
        bar: tqdm | None = None
        try:
            initial = initial_metrics(cfg, slot.engine, rd, start)
            bar = tqdm(total=cfg.rounds, initial=start, desc=cfg.name, unit="round",
                       disable=not cfg.tracking.progress, dynamic_ncols=True)
            r = start
            while r < cfg.rounds:
                self.at = r
                try:
                    row = self.round(r, rows)
                    rows.append(row)
                    tracker.log(row)
                    rd.check()  # still the run's own directory (not removed, not replaced)
                    if every and (r + 1) % every == 0 and r + 1 < cfg.rounds:
                        checkpoint.write(rd.path, r + 1, slot.engine.save_state(),
                                         {"wandb_id": tracker.wandb_id}, cfg.checkpoint.keep)
                except ActorLost as lost:
                    r, rows = self.restart(rd, r, lost)
                    tracker.reopen()
                    bar.n = r
                    segment.update(r, self.restarts)
                    continue
                segment.update(r + 1, self.restarts)
                shown = ("loss", "gmp_accuracy", "gmp_perplexity")
                bar.update(1)
                bar.set_postfix({k: f"{row[k]:.4g}" for k in shown if k in row})
                r += 1
            bar.close()
            rd.check()
            summary = summarize(cfg, plan, slot.engine, rows, initial, segment.total_wall(),
                                rd.run_id)
            summary.update(restarts=segment.total_restarts(),
                           segments_wall_s=segment.walls())
            losses = self.losses + slot.engine.losses
            if losses:  # in this segment: round, clients, node, crash or restart
                summary["actor_losses"] = sorted(losses, key=lambda x: x["round"])
            lost_mail = getattr(slot.engine.executor, "messages_lost", 0)
            if lost_mail:  # sent by clients whose actor died, and lost with it
                summary["messages_lost"] = lost_mail
            if slot.engine.node_of:  # wire bytes between clients on different nodes
                summary["bytes_cross_node"] = (self.cross_node_before
                                               + slot.engine.bytes_cross_node)
            # bytes per directed edge over the run, for `decent report`'s heat map
            rd.write_json("edges.json", {f"{i}-{j}": b for (i, j), b in
                                         sorted(slot.engine.edge_bytes_total().items())})
            rd.write_json("summary.json", summary)
        finally:
            if bar is not None:  # ends its line, so that what follows (Ctrl-C's) is its own
                bar.close()
            tracker.close(summary)
        return RunResult(rd.final, summary, rows)

    def round(self, r: int, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """Run round ``r`` and evaluate it when due: its metrics row."""
        cfg = self.cfg
        assert self.slot is not None
        engine = self.slot.engine
        bytes_total = rows[-1]["bytes_total"] if rows else 0
        sim_total = rows[-1]["sim_time_total_s"] if rows else 0.0
        t0 = time.perf_counter()
        stats, traffic = engine.run_round(r)
        wall = time.perf_counter() - t0
        row: dict[str, Any] = {
            "round": r,
            **reduce_stats(stats),
            "bytes": traffic.bytes,
            "bytes_total": bytes_total + traffic.bytes,
            "messages": traffic.messages,
            "max_edge_bytes": traffic.max_edge_bytes,
            "max_edge_bytes_total": engine.max_edge_bytes_total,
            "sim_time_s": traffic.sim_time_s,
            "sim_compute_s": traffic.sim_compute_s,
            "sim_comm_s": traffic.sim_comm_s,
            "sim_time_total_s": sim_total + traffic.sim_time_s,
            "round_wall_s": wall,
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
        return row


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
