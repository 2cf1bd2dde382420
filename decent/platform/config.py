"""The run configuration: one YAML file plus ``key=value`` overrides, validated.

``decent run file.yaml strategy.lr=0.1`` merges the file and the overrides over the
schema below (OmegaConf). Unknown keys, wrong types and out-of-range values raise a
:class:`ConfigError` naming the field before anything is built or written. The
``strategy``, ``task`` and ``model`` sections are validated against the config dataclass
of the component their ``name`` selects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from decent.platform.errors import ConfigError
from decent.platform.network import NetworkConfig
from decent.platform.registry import config_error
from decent.topologies import TopologyConfig

BACKENDS = ("local", "ray")
WANDB_MODES = ("offline", "online", "disabled")
DEVICES = ("auto", "cpu", "cuda")


@dataclass
class EvalConfig:
    every: int = 5  # evaluate every k rounds (and after the last); 0 = only at the end
    per_client: bool = True  # also each client's own accuracy (costs n evaluations)


@dataclass
class RayConfig:
    address: str | None = None  # None: embedded Ray (or RAY_ADDRESS, set by `ray job submit`)
    clients_per_actor: int = 8
    num_cpus_per_actor: float = 0.0  # 0: no CPU reservation (fractions above the core count hang)
    num_gpus_per_actor: float = 0.0  # > 0: the actor's clients run on cuda
    num_cpus: int | None = None  # embedded Ray only; default: all cores
    object_store_mb: int = 512  # embedded Ray only


@dataclass
class WandbConfig:
    mode: str = "offline"  # offline | online | disabled
    project: str = "decent"
    entity: str | None = None
    group: str | None = None


@dataclass
class TrackingConfig:
    out_dir: str = "runs"
    progress: bool = True
    wandb: WandbConfig = field(default_factory=WandbConfig)


@dataclass
class RunConfig:
    name: str = "run"
    seed: int = 0
    rounds: int = 10
    backend: str = "local"
    device: str = "auto"
    torch_threads: int = 1  # per process; fixed so results do not depend on the machine
    topology: TopologyConfig = field(default_factory=TopologyConfig)
    strategy: Any = field(default_factory=lambda: {"name": "dsgd"})
    task: Any = field(default_factory=lambda: {"name": "digits"})
    model: Any = field(default_factory=lambda: {"name": "mlp"})
    network: NetworkConfig = field(default_factory=NetworkConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)

    @property
    def n(self) -> int:
        return self.topology.n


def load_config(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """Read ``path`` (optional), apply dotlist ``overrides`` and validate everything."""
    layers = []
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError("config", f"file not found: {path}")
        try:
            layers.append(OmegaConf.create(yaml.safe_load(path.read_text()) or {}))
        except (yaml.YAMLError, OmegaConfBaseException) as exc:
            raise ConfigError("config", f"{path} is not valid YAML: {exc}") from None
    for item in overrides:
        if "=" not in item:
            raise ConfigError("overrides", f"'{item}' is not key=value (e.g. strategy.lr=0.1)")
    try:
        layers.append(OmegaConf.from_dotlist(list(overrides)))
    except OmegaConfBaseException as exc:
        raise ConfigError("overrides", str(exc).splitlines()[0]) from None
    return from_layers(*layers)


def from_dict(data: dict[str, Any]) -> RunConfig:
    """Validate a config given as a plain dict (tests, sweeps)."""
    return from_layers(OmegaConf.create(data))


def from_layers(*layers: Any) -> RunConfig:
    from decent.models.registry import MODELS
    from decent.strategies.registry import STRATEGIES
    from decent.tasks.registry import TASKS

    schema = OmegaConf.structured(RunConfig)
    try:
        merged = OmegaConf.merge(schema, *layers)
        cfg: RunConfig = OmegaConf.to_object(merged)  # type: ignore[assignment]
    except OmegaConfBaseException as exc:
        raise config_error(exc, "", schema) from None
    cfg.strategy = STRATEGIES.config(_section(cfg.strategy, "strategy"))
    cfg.task = TASKS.config(_section(cfg.task, "task"))
    cfg.model = MODELS.config(_section(cfg.model, "model"))
    validate(cfg)
    return cfg


def _section(value: Any, name: str) -> dict[str, Any]:
    if isinstance(value, str):  # `strategy: dsgd` is short for `strategy: {name: dsgd}`
        return {"name": value}
    if not isinstance(value, dict):
        raise ConfigError(name, f"must be a mapping with a 'name' key (got {value!r})")
    return value


def _choice(field_name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(
            field_name, f"'{value}' is not allowed; choose one of: {', '.join(allowed)}"
        )


def validate(cfg: RunConfig) -> None:
    """Range checks of the platform's own fields (components check theirs)."""
    _choice("backend", cfg.backend, BACKENDS)
    _choice("device", cfg.device, DEVICES)
    _choice("tracking.wandb.mode", cfg.tracking.wandb.mode, WANDB_MODES)
    if cfg.rounds < 1:
        raise ConfigError("rounds", f"must be ≥ 1 (got {cfg.rounds})")
    if cfg.torch_threads < 1:
        raise ConfigError("torch_threads", f"must be ≥ 1 (got {cfg.torch_threads})")
    if cfg.eval.every < 0:
        raise ConfigError("eval.every", f"must be ≥ 0 (got {cfg.eval.every})")
    if cfg.ray.clients_per_actor < 1:
        raise ConfigError(
            "ray.clients_per_actor", f"must be ≥ 1 (got {cfg.ray.clients_per_actor})"
        )
    for key in ("num_cpus_per_actor", "num_gpus_per_actor"):
        if getattr(cfg.ray, key) < 0:
            raise ConfigError(f"ray.{key}", f"must be ≥ 0 (got {getattr(cfg.ray, key)})")
    if cfg.network.link_mbps <= 0:
        raise ConfigError("network.link_mbps", f"must be > 0 (got {cfg.network.link_mbps})")
    if cfg.network.node_mbps is not None and cfg.network.node_mbps <= 0:
        raise ConfigError("network.node_mbps", f"must be > 0 or null (got {cfg.network.node_mbps})")


def to_yaml(cfg: RunConfig) -> str:
    """The resolved config, as saved in the run directory (re-loadable by load_config)."""
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def to_dict(cfg: RunConfig) -> dict[str, Any]:
    return OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)  # type: ignore[return-value]
