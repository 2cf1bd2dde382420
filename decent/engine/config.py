"""The run configuration: one YAML file plus ``key=value`` overrides, validated.

``decent run file.yaml strategy.lr=0.1`` merges the file and the overrides over the
schema below (OmegaConf). Unknown keys, wrong types and out-of-range values raise a
:class:`ConfigError` naming the field before anything is built or written. The
``strategy``, ``task`` and ``model`` sections are validated against the config dataclass
of the component their ``name`` selects, and so are the sections that pick a registered
part inside them: ``topology``, ``faults.attack``, a strategy's ``compression`` and
``aggregator`` (:func:`decent.core.registry.component`).
"""

from __future__ import annotations

import copy
import dataclasses
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from decent.backends.ray.config import RayConfig
from decent.core.errors import ConfigError, StrategyError
from decent.core.field_types import did_you_mean
from decent.core.registry import (
    COMPONENT,
    component,
    config_error,
    merged_over,
    resolve_components,
)
from decent.core.schema import (
    CHECK,
    Check,
    at_least,
    check_bools,
    one_of,
    section_default,
    seed_field,
    text,
    validate_fields,
)
from decent.engine.compute import ComputeConfig
from decent.engine.eval_config import EvalConfig, check_selection
from decent.engine.execution import ExecutionConfig, check_execution
from decent.engine.imports import import_plugins
from decent.engine.overrides import delete_key, drop_foreign_fields, take_components
from decent.network.faults import FaultsConfig
from decent.network.membership import ChurnConfig
from decent.network.timing import NetworkConfig
from decent.robust.omniscient import check_omniscient
from decent.strategies.config import StrategyConfig
from decent.topologies import TOPOLOGIES, TopologyConfig

WANDB_MODES = ("offline", "online", "disabled")
DEVICES = ("auto", "cpu", "cuda")
# A run name becomes a directory name: letters, digits, '.', '_', '-', not a leading dot.
RUN_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")


@dataclass
class CheckpointConfig:
    every: int = at_least(0, 0)  # rounds between checkpoints; 0 = none
    # committed checkpoints kept (the newest ones): `decent resume --from-previous` goes
    # back to an older one when the newest is damaged
    keep: int = at_least(1, 2)


@dataclass
class WandbConfig:
    # offline: logged to <run_dir>/wandb (wandb sync uploads it); online; disabled
    mode: str = one_of(WANDB_MODES, "offline")
    project: str = text("decent", nullable=False)  # the W&B project
    entity: str | None = text()  # the W&B entity (user or team); None: your default
    group: str | None = text()  # the W&B group; sweeps set it to the sweep's name


@dataclass
class TrackingConfig:
    out_dir: str = text("runs", nullable=False)  # folder that holds the run directories
    progress: bool = True  # show a progress bar while the run runs
    wandb: WandbConfig = field(default_factory=WandbConfig)  # Weights & Biases logging


@dataclass
class SweepConfig:
    """What ``decent sweep`` runs from this file (``decent run`` ignores it)."""

    # dotted key → values, e.g. {strategy.lr: [0.1, 0.01], topology.n: [16, 32]}
    grid: dict[str, Any] = field(default_factory=dict, metadata={CHECK: Check()})
    seeds: int = at_least(1, 1)  # seeds per grid point: seed, seed+1, ...
    parallel: int | None = at_least(1, None, nullable=True)  # None: as resources allow

    def validate(self, prefix: str) -> None:
        for key, values in self.grid.items():
            if not isinstance(values, list) or not values:
                raise ConfigError(f"{prefix}.grid.{key}", "must be a non-empty list of values")


@dataclass
class RunConfig:
    # the run's name: its directory is <out_dir>/<name>-<date>-<time>-<id>
    name: str = text("run", nullable=False)
    # seeds everything random in the run (data split, model init, batches, faults)
    seed: int = seed_field(0)
    rounds: int = at_least(1, 10)  # communication rounds to run
    # the executor: local (every client in this process), ray (clients hosted by Ray
    # actors), or one a module of `imports` registers
    backend: str = text("local", nullable=False)
    # where clients compute; auto: cuda when a GPU is visible, else cpu
    device: str = one_of(DEVICES, "auto")
    # per process; fixed so that results do not depend on the machine
    torch_threads: int = at_least(1, 1)
    # modules imported first, here and in every Ray actor: module names or paths of .py
    # files (relative to where decent runs) whose code registers components of their own
    imports: list[str] = field(default_factory=list, metadata={CHECK: Check()})
    # the communication graph: who may send to whom ({name: ..., and that graph's own
    # fields}; `decent config schema topology` lists them)
    topology: Any = field(default_factory=TopologyConfig, metadata=component(TOPOLOGIES))
    # component sections: a mapping with a `name` as written, the config dataclass of the
    # component it names once validated (the strategy's is a StrategyConfig: what the
    # platform reads of any method, it reads through that)
    strategy: Any = field(default_factory=lambda: {"name": "dsgd"})
    task: Any = field(default_factory=lambda: {"name": "digits"})
    model: Any = field(default_factory=lambda: {"name": "mlp"})
    # the simulated network: link and node bandwidths, latencies
    network: NetworkConfig = field(default_factory=NetworkConfig)
    # the simulated compute clock: what a local step costs each client
    compute: ComputeConfig = field(default_factory=ComputeConfig)
    # message drops, delays, partitions and Byzantine clients
    faults: FaultsConfig = field(default_factory=FaultsConfig)
    # clients that leave, join and crash during the run
    churn: ChurnConfig = field(default_factory=ChurnConfig)
    # when to save the run's state for `decent resume`
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    # the grid `decent sweep` runs from this file
    sweep: SweepConfig = field(default_factory=SweepConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)  # when and what to evaluate
    # the Ray backend: actors, resources, placement, transport
    ray: RayConfig = field(default_factory=RayConfig)
    # how a process runs its clients: one after another, or stacked
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)
    # where results go: run directory, progress bar, Weights & Biases
    tracking: TrackingConfig = field(default_factory=TrackingConfig)

    @property
    def n(self) -> int:
        return self.topology.n

    def validate(self, prefix: str = "") -> None:
        if not RUN_NAME.fullmatch(self.name):
            raise ConfigError("name", f"{self.name!r} is not a valid run name: it names the run "
                              "directory, so use letters, digits, '.', '_' and '-' (no path "
                              "separators, no leading dot)")
        outside = [c for c in self.faults.byzantine if c >= self.n]
        if outside:
            raise ConfigError("faults.byzantine", f"client {outside[0]} does not exist (ids "
                              f"are 0..{self.n - 1} for topology.n={self.n})")
        if self.faults.partition.rounds and self.faults.partition.parts > self.n:
            raise ConfigError("faults.partition.parts", f"at most topology.n={self.n} blocks "
                              f"(got {self.faults.partition.parts})")
        if self.compute.speeds and len(self.compute.speeds) != self.n:
            raise ConfigError("compute.speeds", f"needs one factor per client: {self.n} "
                              f"values for topology.n={self.n} (got {len(self.compute.speeds)})")


def load_config(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """Read ``path`` (optional), apply dotlist ``overrides`` and validate everything.

    ``~key`` deletes ``key`` from the file (Hydra's syntax). An override that names another
    component (``strategy.name=seedflood``) drops the file's fields of that section which
    the new component does not declare, saying which in one line on stderr once the config
    is valid: the file's DSGD ``local_steps`` means nothing to SeedFlood."""
    layers, notes = [], []
    deletions = [item[1:] for item in overrides if item.startswith("~")]
    plain = [item for item in overrides if not item.startswith("~")]
    for item in plain:
        if "=" not in item:
            raise ConfigError("overrides", f"'{item}' is not key=value (e.g. strategy.lr=0.1) "
                              "or ~key (deletes key)")
    if path is not None:
        data = read_yaml(Path(path))
        for key in deletions:
            delete_key(data, key, path)
        if not any(item.startswith("imports=") for item in plain):  # an override may
            import_plugins(data.get("imports") or [])  # switch to a component they register
        notes = drop_foreign_fields(data, plain, path)
        layers.append(OmegaConf.create(data))
    elif deletions:
        raise ConfigError("overrides", f"~{deletions[0]}: there is no config file to delete "
                          "it from")
    try:
        layers.append(OmegaConf.from_dotlist(plain))
    except OmegaConfBaseException as exc:
        raise ConfigError("overrides", str(exc).splitlines()[0]) from None
    cfg = from_layers(*layers)
    for note in notes:  # once the config is valid: a refusal stays one line
        print(note, file=sys.stderr)
    return cfg


def read_yaml(path: Path) -> dict[str, Any]:
    """The mapping in YAML file ``path``; every way it can be unreadable is one line."""
    if path.is_dir():
        raise ConfigError("config", f"{path} is a directory; give a YAML file")
    if not path.is_file():
        raise ConfigError("config", f"file not found: {path}")
    try:
        body = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError("config", f"{path} is not UTF-8 text (byte {exc.object[exc.start]:#x} "
                          f"at offset {exc.start}); save it as UTF-8") from None
    except OSError as exc:
        raise ConfigError("config", f"cannot read {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(body)
    except yaml.YAMLError as exc:
        raise ConfigError("config", f"{path} is not valid YAML: {yaml_problem(exc)}") from None
    if data is None:
        raise ConfigError("config", f"{path} is empty; write at least the sections that "
                          "differ from the defaults (e.g. experiments/quickstart.yaml)")
    if not isinstance(data, dict):
        raise ConfigError("config", f"{path} must be a mapping of sections (name:, topology:, "
                          f"strategy:, ...), not a {type(data).__name__}")
    if any(not isinstance(key, str) for key in data):
        bad = next(key for key in data if not isinstance(key, str))
        raise ConfigError("config", f"{path}: top-level key {bad!r} is not a name")
    return data


def yaml_problem(exc: yaml.YAMLError) -> str:
    """``line L, column C: problem`` of a YAML parse error, on one line."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None) or str(exc)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return where + " ".join(str(problem).split())


def from_dict(data: dict[str, Any]) -> RunConfig:
    """Validate a config given as a plain dict (tests, sweeps)."""
    return from_layers(OmegaConf.create(data))


def from_layers(*layers: Any) -> RunConfig:
    from decent.models.registry import MODELS
    from decent.strategies.registry import STRATEGIES
    from decent.tasks.registry import TASKS

    plain = []
    for layer in layers:
        raw = OmegaConf.to_container(layer) if OmegaConf.is_config(layer) \
            else copy.deepcopy(layer)
        check_shapes(raw, RunConfig, "")
        check_bools(raw, RunConfig, "")
        plain.append(raw)
    # the sections of registered parts (topology, faults.attack) are merged apart from the
    # schema, whose default variant would refuse another variant's fields
    given = take_components(plain, RunConfig)
    try:
        merged = merged_over(RunConfig, *(OmegaConf.create(raw) for raw in plain))
        cfg: RunConfig = OmegaConf.to_object(merged)  # type: ignore[assignment]
    except OmegaConfBaseException as exc:
        raise config_error(exc, "", RunConfig) from None
    import_plugins(cfg.imports)  # components of its own register themselves
    for path, section in given.items():
        *parents, key = path
        owner = cfg
        for part in parents:
            owner = getattr(owner, part)
        resolve_components(owner, {key: section}, ".".join(parents))
    validate_fields(cfg, "")
    from decent.engine.executor import EXECUTORS

    if cfg.backend not in EXECUTORS.names:
        raise ConfigError("backend", f"unknown backend {cfg.backend!r}; choose one of: "
                          f"{', '.join(EXECUTORS.names)}"
                          f"{did_you_mean(cfg.backend, EXECUTORS.names)}")
    for name, value, registry in (("strategy", cfg.strategy, STRATEGIES),
                                  ("task", cfg.task, TASKS), ("model", cfg.model, MODELS)):
        # the component's own sections (a strategy's compression, lr_schedule): mappings
        section = _section(value, name)
        if "name" in section and str(section["name"]) in registry.names:
            check_shapes(section, registry.entry(str(section["name"])).config, f"{name}.")
    cfg.strategy = STRATEGIES.config(_section(cfg.strategy, "strategy"))
    if not isinstance(cfg.strategy, StrategyConfig):  # a strategy added by hand
        raise StrategyError(f"strategy '{cfg.strategy.name}': its Config must subclass "
                            "decent.strategies.config.StrategyConfig")
    fill_schedule_length(cfg)
    cfg.task = TASKS.config(_section(cfg.task, "task"))
    cfg.model = MODELS.config(_section(cfg.model, "model"))
    check_execution(cfg, STRATEGIES.entry(cfg.strategy.name).build)
    check_omniscient(cfg)
    check_selection(cfg)
    return cfg


def fill_schedule_length(cfg: RunConfig) -> None:
    """An inner lr schedule with ``total_steps: 0`` spans the run: rounds × local_steps.
    A cosine decay needs total_steps > warmup_steps, given or filled in."""
    inner = cfg.strategy.inner_schedule()
    if inner is None:
        return
    sched, steps_per_round = inner
    filled = sched.total_steps == 0
    if filled:
        sched.total_steps = cfg.rounds * steps_per_round
    if sched.name != "cosine" or sched.total_steps > sched.warmup_steps:
        return
    if filled:
        raise ConfigError("strategy.lr_schedule.warmup_steps",
                          f"is {sched.warmup_steps}, not shorter than the run's "
                          f"{sched.total_steps} inner steps (rounds × local_steps); shorten it")
    raise ConfigError("strategy.lr_schedule.total_steps",
                      f"the cosine decay needs total_steps > warmup_steps (got "
                      f"{sched.total_steps} ≤ {sched.warmup_steps}); raise total_steps or "
                      "shorten the warm-up")


# Sections given as {name: ..., ...}; `strategy: dsgd` is short for `strategy: {name: dsgd}`.
COMPONENT_SECTIONS = ("strategy", "task", "model")


def check_shapes(data: Any, cls: type, prefix: str) -> None:
    """Every section of ``data`` that the schema ``cls`` declares as a section must be a
    mapping: a list or a number there is one line naming the section (OmegaConf's merge
    would fail with a message naming only the class)."""
    if not isinstance(data, dict):
        return
    for f in dataclasses.fields(cls):
        if f.name not in data or data[f.name] is None:
            continue
        value, name = data[f.name], f"{prefix}{f.name}"
        section = section_default(f)
        if name in COMPONENT_SECTIONS or COMPONENT in f.metadata:
            _section(value, name)
        elif section is not None:
            if not isinstance(value, dict):
                raise ConfigError(name, f"must be a mapping of its fields, e.g. {name}: "
                                  f"{{key: value}} (got {_kind(value)})")
            check_shapes(value, type(section), f"{name}.")


def _kind(value: Any) -> str:
    return "a list" if isinstance(value, list) else f"the value {value!r}"


def _section(value: Any, name: str) -> dict[str, Any]:
    if isinstance(value, str):  # `strategy: dsgd` is short for `strategy: {name: dsgd}`
        return {"name": value}
    if not isinstance(value, dict):
        raise ConfigError(name, f"must be a mapping with a 'name' key, e.g. {name}: "
                          f"{{name: ...}} (got {_kind(value)})")
    return value


def to_yaml(cfg: RunConfig) -> str:
    """The resolved config, as saved in the run directory (re-loadable by load_config)."""
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def to_dict(cfg: RunConfig) -> dict[str, Any]:
    return OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)  # type: ignore[return-value]
