"""A run's summary (``summary.json``): what a finished run reports about itself."""

from __future__ import annotations

from typing import Any

from decent.core.stats import pooled_over_rounds
from decent.engine.config import RunConfig
from decent.engine.evaluation import lower_is_better
from decent.engine.loop import Engine
from decent.engine.plan import RunPlan


def target_reached(cfg: RunConfig, row: dict[str, Any]) -> bool:
    target = cfg.eval.target
    if target.metric is None or target.metric not in row:
        return False
    lower = target.mode == "min" or (target.mode == "auto" and lower_is_better(target.metric))
    value = row[target.metric]
    return value <= target.value if lower else value >= target.value


def summarize(cfg: RunConfig, plan: RunPlan, engine: Engine, rows: list[dict[str, Any]],
              initial: dict[str, Any], wall: float, run_id: str) -> dict[str, Any]:
    """The run's ``summary.json``: :func:`summarize_rows`, the initial model's metrics,
    and what the run was (its layout, its compute charge, who attacked)."""
    summary = summarize_rows(cfg, rows, wall, run_id)
    summary.update({f"initial_{k}": v for k, v in initial.items()
                    if k.startswith(("gmp_", "client_", "consensus"))})
    if cfg.faults.on_the_wire:
        for key in ("dropped_messages", "delayed_messages", "partitioned_messages"):
            summary[f"{key}_total"] = sum(r[key] for r in rows)
    if "live_clients" in rows[-1]:
        summary["live_clients"] = rows[-1]["live_clients"]
        summary["undeliverable_messages_total"] = sum(
            r.get("undeliverable_messages", 0) for r in rows)
    summary.update(engine.layout)
    summary.update(engine.compute_charge)
    if plan.byzantine:
        summary["byzantine_clients"] = plan.byzantine
        summary["attack"] = cfg.faults.attack.name
    note = plan.strategy.privacy_note(plan.byzantine, cfg.faults.attack.name)
    if note is not None:  # what dp_epsilon leaves out, or why there is none
        summary["dp_epsilon_note"] = note
    if plan.topology.assignment is not None:  # two_tier: each worker's aggregator
        summary["aggregator_of"] = {str(w): a for w, a in plan.topology.assignment.items()}
    return summary


def summarize_rows(cfg: RunConfig, rows: list[dict[str, Any]], wall: float, run_id: str
                   ) -> dict[str, Any]:
    """What the metric rows say: totals, statistics pooled over rounds, the last
    evaluation, and when the target was first reached."""
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
    scored = [r for r in rows if "val_loss" in r]
    if scored:  # eval.select: the evaluation of lowest validation loss, the first on a tie
        chosen = min(scored, key=lambda r: r["val_loss"])
        summary["selected_round"] = chosen["round"]
        summary.update({f"selected_{k}": v for k, v in chosen.items()
                        if k.startswith(("gmp_", "val_"))})
    spent = [r["dp_epsilon"] for r in rows if "dp_epsilon" in r]
    if spent:
        # a round's figure is the largest ε of the workers that released in it, and each
        # worker's ε only grows: the run's is the largest over the rounds (asynchronous
        # workers do not all release in the last one)
        summary["dp_epsilon"] = max(spent)
    summary.update(pooled_over_rounds(rows))
    summary.update({k: v for k, v in last_eval.items()
                    if k.startswith(("gmp_", "client_", "consensus"))})
    return summary
