"""Combining what client groups report into the run's evaluation metrics."""

from __future__ import annotations

from typing import Any

import numpy as np


def evaluated_metrics(task_metrics: tuple[str, ...], per_client: bool) -> list[str]:
    """The metric names an evaluation round reports (see :func:`combine`), plus the
    training ``loss`` every round reports."""
    names = ["loss", "consensus_distance", *(f"gmp_{m}" for m in task_metrics)]
    if per_client:
        names += [f"client_{m}_mean" for m in task_metrics]
        if "accuracy" in task_metrics:
            names += ["client_accuracy_min", "client_accuracy_max"]
    return names


def lower_is_better(metric: str) -> bool:
    """Losses and distances, and the costs a report compares (time, bytes, rounds to a
    target, staleness); accuracies and everything else: higher is better."""
    return any(word in metric for word in ("loss", "perplexity", "distance", "time", "bytes",
                                           "rounds_to", "staleness"))


def joiners(topology: Any, round_: int, members: Any) -> list[tuple[int, list[int]]]:
    """(joining client, the present neighbours that bootstrap it) for this round's joins:
    neighbours that were there before (not joining themselves), in id order. A client
    with none keeps the model it had."""
    if members is None or not members.joined:
        return []
    graph = topology.round_graph(round_)
    out = []
    for joiner in members.joined:
        givers = [i for i in graph.neighbors[joiner]
                  if i in members.present and i not in members.joined]
        if givers:
            out.append((joiner, givers))
    return out


def mean_model(sums: list[np.ndarray | None], n: int) -> np.ndarray:
    """θ̄ = Σ θ_i / n, rounded to float32 (and held as float64).

    Rounding makes θ̄ the same whichever way the float64 partial sums were grouped
    (clients per actor), so every metric derived from it is identical across backends.
    A group with no client taking part reports None."""
    parts = [s for s in sums if s is not None]
    return (np.sum(parts, axis=0) / n).astype(np.float32).astype(np.float64)


def combine(reports: list[dict[str, Any]]) -> dict[str, float]:
    """Merge per-group evaluation reports; reductions run in client order."""
    sq_dist: dict[int, float] = {}
    per_client: dict[int, dict[str, float]] = {}
    metrics: dict[str, float] = {}
    for report in reports:
        sq_dist.update(report["sq_dist"])
        per_client.update(report["client"])
        if "gmp" in report:
            metrics.update({f"gmp_{k}": v for k, v in report["gmp"].items()})
        if "gmp_val" in report:  # the averaged model on the validation split
            metrics.update({f"val_{k}": v for k, v in report["gmp_val"].items()})
    dists = [sq_dist[c] for c in sorted(sq_dist)]
    metrics["consensus_distance"] = float(sum(dists) / len(dists))
    for key in sorted({k for m in per_client.values() for k in m}):
        values = [per_client[c][key] for c in sorted(per_client)]
        metrics[f"client_{key}_mean"] = float(sum(values) / len(values))
        if key == "accuracy":  # the spread across clients shows who consensus leaves behind
            metrics["client_accuracy_min"] = float(min(values))
            metrics["client_accuracy_max"] = float(max(values))
    return metrics
