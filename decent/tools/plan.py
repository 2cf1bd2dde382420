"""``decent plan``: what a sweep's grid costs on this machine, before it runs.

Each config is a sweep (one method, its ``sweep:`` grid × seeds). Its cost is counted in
*client steps* — a round of ``n`` clients taking ``local_steps`` steps each (one for a
zeroth-order iteration) is ``n × local_steps`` of them — and *evaluated examples* — an
evaluation reads the test split (and the validation split when ``eval.select`` picks by
it), once more for every client when ``eval.per_client``. Both are exact per cell, from
its config. What one of each costs comes from a probe: the sweep's first cell at the
smallest client count of its grid, run here for a few rounds with ``backend: local``
(its first round, which builds and warms up, left out; the median of the others) and
one evaluation timed; or from a saved record of such probes (``--record``; ``--save``
writes one). The estimate is then seconds per client step × client steps + seconds per
evaluated example × evaluated examples, per cell, summed per method: it assumes a
round's cost grows linearly with its clients (SeedFlood's batched rounds measured
×10.4 from 128 to 1 024 clients, ``benchmarks/results/seedflood_scale.txt``) and that
every cell's prompts cost what the probe's task's do (BoolQ's are longer than SST-2's:
probe it with ``--probe task.name=boolq`` to price those cells apart). Part of an
evaluation does not grow with its examples (the clients' mean model, their distances to
it), so the probe's evaluation is best timed at the cells' own held-out sizes."""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from decent.core.errors import ConfigError
from decent.engine.config import RunConfig, load_config
from decent.tools.sweep import Trial, expand, parse_grid

# what a probe turns off: it times the method's rounds and one evaluation, nothing else
PROBE_FIXED = ("backend=local", "eval.every=0", "eval.initial=false", "eval.select=none",
               "checkpoint.every=0", "tracking.progress=false",
               "tracking.wandb.mode=disabled")


def method_label(cfg: RunConfig) -> str:
    """The method a cell runs, as the plan's rows name it (``dsgd+lora``: DSGD on LoRA
    adapters)."""
    lora = getattr(getattr(cfg.model, "lora", None), "enabled", False)
    return f"{cfg.strategy.name}+lora" if lora else str(cfg.strategy.name)


def steps_per_round(cfg: RunConfig) -> int:
    return int(getattr(cfg.strategy, "local_steps", 1) or 1)


def client_steps(cfg: RunConfig) -> int:
    return cfg.n * steps_per_round(cfg) * cfg.rounds


def evaluations(cfg: RunConfig) -> int:
    """How many evaluations the run makes (every ``eval.every`` rounds and the last, and
    one before training with ``eval.initial``)."""
    from decent.run.runner import eval_due

    due = sum(eval_due(cfg, r) for r in range(cfg.rounds))
    return due + int(cfg.eval.initial)


def examples_per_evaluation(cfg: RunConfig) -> int:
    """The examples one evaluation reads: the mean model's (and each client's, with
    ``eval.per_client``) on the test split and, selecting by it, the validation split. A
    task that states no held-out size (a fraction of a dataset) counts 1 per model."""
    task = cfg.task
    held_out = getattr(task, "num_test", None)
    if held_out is None:
        held_out = 1
    elif cfg.eval.select == "val_loss":
        held_out += getattr(task, "num_val", 0) or 0
    return held_out * (cfg.n + 1 if cfg.eval.per_client else 1)


@dataclass(frozen=True)
class Probe:
    """What one client step and one evaluated example cost, measured on ``device``."""

    method: str
    device: str
    s_per_client_step: float
    s_per_example: float | None  # None: the record has no evaluation figure
    clients: int  # the probe's own settings, said beside the estimate
    rounds: int
    source: str

    def seconds(self, cfg: RunConfig) -> tuple[float, float]:
        """Training and evaluation seconds of the cell ``cfg``."""
        train = self.s_per_client_step * client_steps(cfg)
        evals = 0.0 if self.s_per_example is None else \
            self.s_per_example * evaluations(cfg) * examples_per_evaluation(cfg)
        return train, evals


def probe_config(trial: Trial, path: str, rounds: int, extra: list[str]) -> RunConfig:
    # run by an engine alone (no runner): nothing is written, so no run directory
    return load_config(path, [*trial.overrides, f"rounds={rounds}", *PROBE_FIXED, *extra])


def measure(cfg: RunConfig, label: str, source: str) -> Probe:
    """Run ``cfg``'s rounds here, timing each and then one evaluation of the mean model."""
    import torch

    from decent.backends.local import local_engine
    from decent.engine.group import resolve_device

    engine = local_engine(cfg)
    walls = []
    threads = torch.get_num_threads()
    try:
        for r in range(cfg.rounds):
            t0 = time.perf_counter()
            engine.run_round(r)
            walls.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        engine.evaluate(cfg.eval.per_client, engine.present(cfg.rounds - 1))
        eval_s = time.perf_counter() - t0
    finally:
        torch.set_num_threads(threads)
    round_s = statistics.median(walls[1:] if len(walls) > 1 else walls)
    examples = examples_per_evaluation(cfg)
    return Probe(label, resolve_device(cfg).type, round_s / (cfg.n * steps_per_round(cfg)),
                 eval_s / examples if examples else None, cfg.n, cfg.rounds, source)


def read_record(path: str) -> dict[str, Probe]:
    """A record ``--save`` wrote (or one made the same way from a benchmark's figures)."""
    try:
        data = json.loads(Path(path).read_text())
        probes = {p["method"]: Probe(**p) for p in data["probes"]}
    except OSError as exc:
        raise ConfigError("--record", f"cannot read {path}: {exc.strerror}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError("--record", f"{path} is not a plan record (a JSON object whose "
                          f"'probes' list holds Probe fields): {exc}") from None
    return probes


def hours(seconds: float) -> str:
    return f"{seconds / 3600:,.1f} h" if seconds >= 360 else f"{seconds / 60:,.1f} min"


@dataclass(frozen=True)
class Line:
    method: str
    cells: int
    client_steps: int
    evaluated: int
    probe: Probe | None
    train_s: float
    eval_s: float


def table(lines: list[Line], where: str) -> str:
    head = (f"{'method':<14} {'cells':>6} {'client steps':>14} {'s/client step':>14} "
            f"{'eval examples':>14} {'s/example':>10} {'training':>10} {'evaluation':>11} "
            f"{'total':>10}")
    out = [f"# the grid's cost {where}", head]
    for ln in lines:
        if ln.probe is None:
            out.append(f"{ln.method:<14} {ln.cells:>6} {ln.client_steps:>14,} "
                       f"{'—':>14} {ln.evaluated:>14,} {'—':>10}   (not in the record)")
            continue
        per_ex = "—" if ln.probe.s_per_example is None else f"{ln.probe.s_per_example:.4f}"
        evals = "—" if ln.probe.s_per_example is None else hours(ln.eval_s)
        out.append(f"{ln.method:<14} {ln.cells:>6} {ln.client_steps:>14,} "
                   f"{ln.probe.s_per_client_step:>14.4f} {ln.evaluated:>14,} {per_ex:>10} "
                   f"{hours(ln.train_s):>10} {evals:>11} {hours(ln.train_s + ln.eval_s):>10}")
    known = [ln for ln in lines if ln.probe is not None]
    total = sum(ln.train_s + ln.eval_s for ln in known)
    out.append(f"{'all':<14} {sum(ln.cells for ln in lines):>6} "
               f"{sum(ln.client_steps for ln in lines):>14,} {'':>14} "
               f"{sum(ln.evaluated for ln in lines):>14,} {'':>10} {'':>10} {'':>11} "
               f"{hours(total):>10}" + ("" if len(known) == len(lines)
                                          else "  (the methods priced)"))
    for ln in known:
        p = ln.probe
        out.append(f"  {ln.method}: {p.source} ({p.clients} clients, {p.rounds} rounds, "
                   f"{p.device})")
    return "\n".join(out)


def plan(configs: list[str], overrides: list[str], grid_items: list[str] | None,
         seeds: int | None, measure_rounds: int, probe_items: list[str],
         record: str | None, save: str | None) -> str:
    """The table ``decent plan`` prints (and the record ``save`` names, written)."""
    if not configs:
        raise ConfigError("configs", "name at least one sweep config (a YAML file)")
    if record is not None and measure_rounds:
        raise ConfigError("--measure", "measure here or read --record, not both")
    if record is None and measure_rounds < 2:
        raise ConfigError("--measure", "at least 2 rounds: the first builds and warms up "
                          f"and is left out (got {measure_rounds}); or give --record")
    recorded = read_record(record) if record is not None else {}
    lines, probes = [], []
    for path in configs:
        base = load_config(path, overrides)
        grid = {**{k: list(v) for k, v in base.sweep.grid.items()},
                **parse_grid(grid_items or [])}
        trials = expand(path, grid, seeds or base.sweep.seeds, overrides, base.seed)
        by_method: dict[str, list[Trial]] = {}
        for trial in trials:
            by_method.setdefault(method_label(trial.config), []).append(trial)
        for label, group in by_method.items():
            probe = recorded.get(label)
            if record is None:
                first = min(group, key=lambda t: t.config.n)
                cfg = probe_config(first, path, measure_rounds, probe_items)
                probe = measure(cfg, label, f"measured here, {Path(path).name}'s cell "
                                f"{first.key}" + (f" with {' '.join(probe_items)}"
                                                  if probe_items else ""))
                probes.append(probe)
            costs = [probe.seconds(t.config) for t in group] if probe else [(0.0, 0.0)]
            lines.append(Line(label, len(group), sum(client_steps(t.config) for t in group),
                              sum(evaluations(t.config) * examples_per_evaluation(t.config)
                                  for t in group), probe,
                              sum(c[0] for c in costs), sum(c[1] for c in costs)))
    if save is not None:
        Path(save).write_text(json.dumps({"probes": [asdict(p) for p in probes]}, indent=1)
                              + "\n")
    where = f"from the record {record}" if record else "on this machine"
    return table(lines, where)
