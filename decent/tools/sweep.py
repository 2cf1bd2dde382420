"""`decent sweep`: every combination of a grid of overrides, × seeds, as Ray Tune trials.

Each trial is an ordinary run (its own run directory, written into the sweep directory);
the sweep directory holds ``sweep.json``, the index of its trials. Every trial's config
is built and checked before the first one starts, so a bad grid costs nothing. Running
the same command again continues the sweep: trials whose run finished are not re-run.

Trials run as Ray Tune trials on the embedded Ray (or the cluster ``ray.address`` /
``RAY_ADDRESS`` names), as many at a time as their resources allow (``--parallel`` caps
it): one CPU each (``torch_threads`` of them), and for a run that itself uses
``backend: ray`` a placement group holding its actors, so its actors are scheduled with it.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from decent.core.errors import ConfigError
from decent.engine.config import RunConfig, load_config
from decent.tools.sweep_output import (
    error_log,
    line_printer,
    sweep_metric,
    trial_label,
    tune_console,
    varying_keys,
)

if TYPE_CHECKING:
    from decent.run.stops import RunInterrupted

INDEX = "sweep.json"


@dataclass(frozen=True)
class Trial:
    key: str  # stable name of the combination: the trial's run name
    overrides: tuple[str, ...]
    config: RunConfig


def parse_grid(items: list[str]) -> dict[str, list[str]]:
    """``key=v1,v2`` command-line items as {key: [v1, v2]}."""
    grid: dict[str, list[str]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or not key:
            raise ConfigError("--grid", f"'{item}' is not key=v1,v2,... (e.g. "
                              "strategy.lr=0.1,0.01)")
        parts = [v for v in values.split(",") if v != ""]
        if not parts:
            raise ConfigError(f"--grid {key}", "gives no values; list them after '=', "
                              "separated by commas")
        grid[key] = parts
    return grid


def value_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in text)


def part_name(key: str, value: Any) -> str:
    """A trial name's part for one grid key: ``lr0.1``, ``n16``; a name value on its own
    (``task.name=sst2`` → ``sst2``)."""
    last = key.rsplit(".", 1)[-1]
    return value_text(value) if last == "name" else f"{last}{value_text(value)}"


def expand(path: str, grid: dict[str, list[Any]], seeds: int, overrides: list[str],
           base_seed: int) -> list[Trial]:
    """Every trial of the sweep, each config validated (one line naming the grid value
    that fails)."""
    if not grid and seeds < 1:
        raise ConfigError("--grid", "the sweep is empty")
    keys = sorted(grid)
    for key in keys:
        if not grid[key]:
            raise ConfigError(f"sweep.grid.{key}", "gives no values")
    trials = []
    for combo in itertools.product(*(grid[k] for k in keys)):
        for s in range(seeds):
            chosen = [f"{k}={value_text(v)}" for k, v in zip(keys, combo, strict=True)]
            seed = base_seed + s
            name = "-".join(slug(part_name(k, v)) for k, v in zip(keys, combo, strict=True))
            key = f"{name}-seed{seed}" if name else f"seed{seed}"
            trial_overrides = tuple([*overrides, *chosen, f"seed={seed}", f"name={key}"])
            try:
                cfg = load_config(path, trial_overrides)
            except ConfigError as exc:
                where = ", ".join(chosen) or "the base config"
                raise ConfigError(exc.field, f"{exc.message} (in the trial {where})") from None
            trials.append(Trial(key, trial_overrides, cfg))
    return trials


def trial_resources(cfg: RunConfig, resources: dict[str, float]) -> Any:
    """What one trial needs: a CPU bundle for its driver, and one bundle per actor of the
    layout the run will plan when it uses the Ray backend."""
    from ray import tune

    driver = {"CPU": float(cfg.torch_threads)}
    if cfg.backend != "ray":
        return tune.PlacementGroupFactory([driver])
    from decent.backends.ray.layout import as_one_node, plan_layout

    actor = {"CPU": cfg.ray.num_cpus_per_actor} | (
        {"GPU": cfg.ray.num_gpus_per_actor} if cfg.ray.num_gpus_per_actor else {})
    actors = plan_layout(cfg, as_one_node(resources)).actors
    return tune.PlacementGroupFactory([driver] + [actor] * actors)


def size_actors(trials: list[Trial], parallel: int | None,
                resources: dict[str, float]) -> list[Trial]:
    """The trials with their configs as the layout planner sizes them when the trials
    that run at once share the cluster (:func:`decent.backends.ray.layout.trial_layout`)."""
    from decent.backends.ray.layout import as_one_node, trial_layout

    concurrent = min(len(trials), parallel or len(trials))
    return [dataclasses.replace(t, config=trial_layout(t.config, as_one_node(resources),
                                                       concurrent)[0])
            if t.config.backend == "ray" else t for t in trials]


def run_trial(spec: dict[str, Any]) -> None:
    """A Tune function trainable: one decent run; its summary is the trial's result."""
    from ray import tune

    from decent.engine.config import from_dict
    from decent.run.runner import run

    os.chdir(spec["cwd"])  # Tune starts trials in their own folder: paths stay relative to
    result = run(from_dict(spec["config"]))  # where `decent sweep` was run
    if result.summary and spec["config"]["tracking"]["wandb"]["mode"] != "disabled":
        import wandb

        # stop W&B's service now: at the actor's exit Ray may already have cut it off
        wandb.teardown()
    numbers = {k: v for k, v in result.summary.items() if isinstance(v, (int, float))}
    tune.report({**numbers, "run_dir": str(result.run_dir)})


def finished(sweep_dir: Path) -> dict[str, str]:
    """Trial key → run directory of every trial whose run finished."""
    done = {}
    for summary in sweep_dir.glob("*/summary.json"):
        name = json.loads(summary.read_text()).get("name")
        if name:
            done[name] = str(summary.parent)
    return done


def write_index(sweep_dir: Path, data: dict[str, Any]) -> None:
    tmp = sweep_dir / f".{INDEX}.tmp"
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, sweep_dir / INDEX)


def sweep(path: str, grid_items: list[str], seeds: int | None, overrides: list[str],
          parallel: int | None = None, sweep_dir: str | None = None,
          metric: str | None = None, emit: Callable[[str], None] | None = None,
          verbose: bool = False) -> dict[str, Any]:
    """Run (or continue) a sweep; its index. ``emit`` gets one line per trial as it ends
    (:mod:`.sweep_output`); ``verbose`` brings back Ray Tune's own progress output."""
    base = load_config(path, overrides)
    metric = sweep_metric(base, metric)
    section = base.sweep
    grid: dict[str, list[Any]] = {k: list(v) for k, v in section.grid.items()}
    grid.update(parse_grid(grid_items))
    seeds = seeds if seeds is not None else section.seeds
    if seeds < 1:
        raise ConfigError("--seeds", f"must be ≥ 1 (got {seeds})")
    parallel = parallel if parallel is not None else section.parallel
    if parallel is not None and parallel < 1:
        raise ConfigError("--parallel", f"must be ≥ 1 (got {parallel})")
    if not grid and seeds == 1:
        raise ConfigError("--grid", "the sweep is empty: give --grid key=v1,v2 (or a "
                          "sweep: section), or --seeds N")
    folder = Path(sweep_dir) if sweep_dir else Path(base.tracking.out_dir) / f"{base.name}-sweep"
    folder = folder.expanduser().resolve()
    group = f"{base.name}-sweep"
    common = [*overrides, f"tracking.out_dir={folder}", "tracking.progress=false",
              f"tracking.wandb.group={group}"]
    trials = expand(path, grid, seeds, common, base.seed)
    from decent.run.runner import check

    for trial in trials:  # the graph exists, the method accepts it, the device is there
        check(trial.config)
    folder.mkdir(parents=True, exist_ok=True)
    done = finished(folder)
    todo = [t for t in trials if t.key not in done]
    index = {"config": str(Path(path).resolve()), "grid": grid, "seeds": seeds,
             "overrides": overrides, "metric": metric,
             "trials": [{"key": t.key, "overrides": list(t.overrides),
                         "run_dir": done.get(t.key), "status": "done" if t.key in done
                         else "pending"} for t in trials]}
    write_index(folder, index)
    if todo:
        keys = varying_keys(grid)
        labels = {t.key: trial_label(t.overrides, keys) for t in todo}
        printer = line_printer(labels, metric, emit or (lambda line: None))
        try:
            logs = tune_trials(todo, folder, parallel, base, printer, verbose)
        except KeyboardInterrupt as exc:  # Ctrl-C: say what is done, and how to go on
            raise interrupted(folder, index, exc) from None
        done = finished(folder)
        for entry in index["trials"]:
            entry["run_dir"] = done.get(entry["key"])
            entry["status"] = "done" if entry["key"] in done else "failed"
            if entry["key"] in logs and entry["key"] not in done:
                entry["log"] = logs[entry["key"]]  # where the failed trial's traceback is
        write_index(folder, index)
    index["dir"] = str(folder)
    return index


def interrupted(folder: Path, index: dict[str, Any], after: BaseException
                ) -> RunInterrupted:
    """The index as Ctrl-C left the sweep (the trials that finished done, the others
    pending: the same command runs them, from their start), and the line that says so."""
    from decent.run.stops import RunInterrupted

    done = finished(folder)
    for entry in index["trials"]:
        entry["run_dir"] = done.get(entry["key"])
        entry["status"] = "done" if entry["key"] in done else "pending"
    write_index(folder, index)
    count = sum(entry["status"] == "done" for entry in index["trials"])
    return RunInterrupted(f"sweep interrupted: {count} of {len(index['trials'])} trials "
                          f"done; the same command continues it in {folder} (finished "
                          "trials are kept, the others run again)", after)


def trial_folder(trial: Any) -> str:
    """A Tune trial's folder, named after its run (Tune's own name holds the whole config,
    cut short); the trial id keeps a re-run's folder apart from an earlier attempt's."""
    return f"{trial.config['config']['name']}_{trial.trial_id}"


def tune_trials(trials: list[Trial], folder: Path, parallel: int | None, base: RunConfig,
                printer: Any, verbose: bool = False) -> dict[str, str]:
    """Run ``trials`` with Ray Tune (``printer``: a Tune callback for every trial's end);
    the error log of each one that failed. Tune's progress tables and Ray's INFO log are
    left out unless ``verbose``: the trial lines and the closing table say what they did."""
    from ray import tune

    from decent.backends.ray.session import connect
    from decent.engine.config import to_dict

    # Ctrl-C stops the sweep at once, as it stops a run (decent.run.stops): Tune's own
    # handler would wind the trials down, marking those it stopped as errors
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"

    started = connect(base.ray, log_level=logging.INFO if verbose else logging.WARNING)
    try:
        import ray

        cluster = ray.cluster_resources()
        trials = size_actors(trials, parallel, cluster)
        # one resource shape for all (the grid may change n or the backend: the largest)
        resources = max((trial_resources(t.config, cluster) for t in trials),
                        key=lambda pgf: len(pgf.bundles))
        tuner = tune.Tuner(
            tune.with_resources(run_trial, resources),
            param_space={"config": tune.grid_search([to_dict(t.config) for t in trials]),
                         "cwd": os.getcwd()},
            # a trial actor imports torch once and serves trial after trial
            tune_config=tune.TuneConfig(max_concurrent_trials=parallel, reuse_actors=True,
                                        trial_dirname_creator=trial_folder),
            run_config=tune.RunConfig(storage_path=str(folder / "tune"), name="trials",
                                      verbose=1 if verbose else 0,
                                      callbacks=[printer]),
        )
        with tune_console(verbose):
            results = tuner.fit()
        return {result.config["config"]["name"]: error_log(result.path)
                for result in results if result.error}
    finally:
        if started:
            from decent.backends.ray.session import shutdown

            shutdown()
