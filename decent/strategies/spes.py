"""SPES — sparse expert synchronisation for MoE pretraining (Zhang et al.).

A star: the server is vertex 0, the N workers 1..N hold the data. The model's parameters
are the shared φ (embeddings, attention, norms, routers, head) and the experts {E_e}; the
experts are split into disjoint sets P_1..P_N, one per worker (expert e of every layer goes
to the same worker). Round r:

  1. worker i starts from the global model and runs H inner AdamW steps on its data,
     updating φ and its own experts P_i only: every other expert is frozen — no gradient,
     no optimiser state — and held once per process for all the workers it hosts;
     the loss is cross-entropy + balance · load-balancing loss + z · router z-loss
     + logit_z · output-logit z-loss (each as the authors' trainer computes it:
     :mod:`decent.models.router_losses`, :mod:`decent.models.output_logits`), the
     gradient clipped to norm grad_clip;
  2. worker i uploads Δφ_i = φ − φ_i and its experts {E_e : e ∈ P_i}      (never the rest);
  3. the server sets the mean Δφ as the gradient of φ for one outer SGD step (lr 1:
     φ ← mean φ_i; Nesterov optional) and assigns E_e ← E_e of its owner;
  4. expert-merging warm-up: after the sync that ends inner step t = (r + 1)·H, if
     t < T_w and M divides t, every layer's experts are merged with the top-K peers whose
     gate projections are most cosine-similar,
     E_e ← E_e + α_t · mean_{k∈TopK(e)} (E_k − E_e), α_t = α_0 (1 − t/T_w)
     (:mod:`decent.models.expert_merging`, as the authors' released server code);
  5. the server broadcasts the global model (φ and every expert).

Bytes per round: up 4·(|φ| + |P_i|) per worker, down 4·d per worker; DiLoCo moves 4·d both
ways. Defaults are the paper's and its released config's (:class:`SPESConfig`).

The frozen experts of a process's workers are the global model's: one copy per version
of the global model some hosted worker still holds (one version, unless a fault kept a
broadcast from a worker), keyed by the round the broadcast was sent in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from decent.core.errors import ConfigError
from decent.core.graph import GraphFacts
from decent.core.messages import Message
from decent.core.schema import at_least, in_range, one_of, positive
from decent.core.storable import storable
from decent.models import params
from decent.models.expert_merging import SIMILARITY, TASK_VECTORS, merge_layer
from decent.models.experts import SplitExperts, expert_parameter_names, shared_parameter_names
from decent.models.router_losses import RouterLossConfig
from decent.robust.aggregators import robust_field
from decent.strategies.base import Client, PhaseContext, SharedTensors, Strategy
from decent.strategies.fedavg import SERVER, OuterStepConfig, ServerStar, outer_optimizer
from decent.strategies.inbox import Inbox
from decent.strategies.local_training import (
    OPTIMIZERS,
    LRScheduleConfig,
    adamw_betas,
    local_steps,
    make_optimizer,
)
from decent.strategies.phases import SERVER as SERVER_ROLE
from decent.strategies.phases import WORKER, phase

PARTITIONS = ("contiguous", "round_robin", "explicit")
INITIAL = -1  # version key of the initial model's experts


@dataclass
class SPESConfig(OuterStepConfig):
    """Defaults are the paper's (Table A1, §4) and, where the text lost a value, the
    authors' released 1 B config (zjr2000/SPES,
    ``configs/spes_experiments/spes_moe_1b_slimpajama_100b_tokens_bsz256_4nodes/node_0.yaml``)
    and the code that reads it: AdamW lr 5e-4, β = (0.9, 0.95), weight decay 0.1, gradient
    clipping 1.0, a 2 000-step linear warm-up from 0.1 · lr (their scheduler's default
    start, ``spes/optim.py``) then cosine decay to 0.1 · lr over the run
    (``cosine_with_warmup``, ``alpha_f: 0.1``), sync every 100 steps, the output-logit
    z-loss 1e-4 (what their trainer applies: the config's 1e-5 is never read, see
    :mod:`decent.models.output_logits`) and OLMoE's router coefficients (0.01, 0.001) on
    megablocks' router losses (:mod:`decent.models.router_losses`); merging T_w = 12 500,
    M = 500, α_0 = 0.1, K = 4."""

    name: str = "spes"
    local_steps: int = at_least(1, 100)  # inner steps between synchronisations (the paper's 100)
    optimizer: str = one_of(OPTIMIZERS, "adamw")  # the inner optimiser (the paper's AdamW)
    lr: float = positive(5e-4)  # the inner peak learning rate (the paper's 5e-4)
    betas: list[float] = adamw_betas((0.9, 0.95))  # AdamW's (β1, β2) (the paper's (0.9, 0.95))
    weight_decay: float = at_least(0, 0.1)  # the inner AdamW's weight decay (the paper's 0.1)
    # the gradient's global norm is clipped to this before each inner step
    grad_clip: float = at_least(0, 1.0)
    # 2 000 warm-up steps from 0.1 · lr, then cosine decay to 0.1 · lr (the paper's; the
    # warm-up's start is the authors' scheduler's default)
    lr_schedule: LRScheduleConfig = field(default_factory=lambda: LRScheduleConfig(
        name="cosine", warmup_steps=2000, warmup_start_ratio=0.1, min_lr_ratio=0.1))
    # the output-logit z-loss coefficient: 1e-4, what the authors' trainer applies (their
    # configs' 1e-5 is never read; decent.models.output_logits)
    logit_z_loss: float = at_least(0, 1e-4)
    # expert e → worker: contiguous blocks (e·N // E), round robin (e mod N), or the
    # client ids listed in expert_owner (one per expert index)
    partition: str = one_of(PARTITIONS, "contiguous")
    # partition=explicit: the worker that owns each expert, one id per expert index
    expert_owner: list[int] = at_least(1, [], each=True)
    merge_warmup_steps: int = at_least(0, 12_500)  # T_w in inner steps; 0: no merging
    merge_every: int = at_least(1, 500)  # M, a multiple of local_steps
    merge_alpha: float = in_range(0.1, 0, 1)  # α_0
    merge_top_k: int = at_least(1, 4)  # K
    # α · mean of the K task vectors (the authors' code), or α · their sum (K times the
    # step; not the authors')
    merge_task_vectors: str = one_of(TASK_VECTORS, "mean")
    # similarity of the gate projections (the authors' w1), or of gate ‖ up
    merge_similarity: str = one_of(SIMILARITY, "gate")
    # OLMoE's router coefficients: balance 0.01, z 0.001
    router_loss: RouterLossConfig = field(
        default_factory=lambda: RouterLossConfig(balance=0.01, z=0.001))
    # how the server combines the shared parameters' Δφ: their mean (the paper's), or a
    # robust rule; each expert has one owner and is taken as it sends it
    robust: Any = robust_field()

    def validate(self, prefix: str = "strategy") -> None:
        super().validate(prefix)
        if self.partition == "explicit" and not self.expert_owner:
            raise ConfigError(f"{prefix}.expert_owner",
                              "partition=explicit needs the owner (a worker id) of every expert")
        if self.partition != "explicit" and self.expert_owner:
            raise ConfigError(f"{prefix}.expert_owner",
                              f"is only read with partition=explicit (got {self.partition!r})")
        if self.merge_warmup_steps > 0 and self.merge_every % self.local_steps:
            raise ConfigError(f"{prefix}.merge_every",
                              f"experts merge at a sync: must be a multiple of local_steps "
                              f"({self.local_steps}); got {self.merge_every}")


@storable
@dataclass
class FrozenExperts:
    """A process's copies of the global experts its workers hold frozen: name → tensor per
    version, and which version each hosted worker holds."""

    versions: dict[int, dict[str, torch.Tensor]]
    holders: dict[int, int] = field(default_factory=dict)
    next_key: int = INITIAL - 1  # keys for versions made by a bootstrap


@storable
@dataclass
class SPESProcess:
    """What the clients of one process share: the expert layout and the frozen experts."""

    expert_names: dict[int, list[str]]  # expert index → its parameters in every layer
    owner: dict[int, int]  # expert index → worker id
    phi_names: list[str]
    frozen: FrozenExperts

    def own(self, cid: int) -> list[str]:
        return [n for e, o in self.owner.items() if o == cid for n in self.expert_names[e]]

    def all_experts(self) -> list[str]:
        return [n for e in sorted(self.expert_names) for n in self.expert_names[e]]

    def frozen_of(self, cid: int) -> frozenset[str]:
        """The experts worker ``cid`` holds frozen: every one it does not own."""
        return frozenset(self.all_experts()) - frozenset(self.own(cid))


@dataclass
class SPESState:
    """The server holds the outer optimiser over φ; a worker its inner optimiser over φ
    and its own experts."""

    outer: torch.optim.Optimizer | None = None
    optimizer: torch.optim.Optimizer | None = None


class SPES(ServerStar, Strategy[SPESState]):
    name = "spes"
    Config = SPESConfig
    State = SPESState
    batch_note = "each client trains its own set of experts, frozen by a seed of its own"

    def __init__(self, cfg: SPESConfig, graph: GraphFacts) -> None:
        super().__init__(cfg, graph)
        self.require_star(graph)
        self.rule = self.server_rule(cfg.robust)
        workers = self.data_holders()
        stray = sorted({o for o in cfg.expert_owner if o not in workers})
        if stray:
            raise ConfigError("strategy.expert_owner",
                              f"owners must be worker ids 1..{self.n - 1}; got {stray}")

    # ------------------------------------------------------------------ the partition
    def owners(self, experts: int) -> dict[int, int]:
        """Expert index → the worker that trains it (every expert exactly once)."""
        workers, cfg = self.data_holders(), self.cfg
        if cfg.partition == "explicit":
            if len(cfg.expert_owner) != experts:
                raise ConfigError("strategy.expert_owner",
                                  f"the model has {experts} experts per layer: list one owner "
                                  f"for each (got {len(cfg.expert_owner)})")
            return dict(enumerate(cfg.expert_owner))
        if cfg.partition == "round_robin":
            return {e: workers[e % len(workers)] for e in range(experts)}
        return {e: workers[e * len(workers) // experts] for e in range(experts)}

    # ------------------------------------------------------------------ set-up
    def init_process(self, model: torch.nn.Module) -> SPESProcess:
        names = expert_parameter_names(model)
        if not names:
            raise ConfigError("model.path", "spes trains a mixture-of-experts model (e.g. "
                              "tiny-moe, small-moe); this model has no experts")
        if any(not p.requires_grad for p in model.parameters()):
            raise ConfigError("model.lora.enabled", "spes trains whole experts: turn LoRA off")
        per_layer = len(names)
        if self.cfg.merge_warmup_steps > 0 and self.cfg.merge_top_k >= per_layer:
            raise ConfigError("strategy.merge_top_k",
                              f"must be below the {per_layer} experts per layer")
        live = dict(model.named_parameters())
        process = SPESProcess(names, self.owners(per_layer), shared_parameter_names(model),
                              FrozenExperts({}))
        for name in process.all_experts():  # the replicas share the frozen ones
            live[name].requires_grad_(False)
        process.frozen.versions[INITIAL] = {n: live[n] for n in process.all_experts()}
        return process

    def init_state(self, client: Client[SPESState], shared: SPESProcess) -> SPESState:
        if client.cid == SERVER:  # the global model: a private copy of every expert
            _privatise(client.model, shared.all_experts(), trainable=False)
            live = dict(client.model.named_parameters())
            return SPESState(outer=outer_optimizer([live[n] for n in shared.phi_names],
                                                   self.cfg))
        _privatise(client.model, shared.own(client.cid), trainable=True)
        shared.frozen.holders.setdefault(client.cid, INITIAL)
        return SPESState(optimizer=make_optimizer(client.model, self.cfg))

    def init_eval_state(self, client: Client[SPESState], shared: SPESProcess) -> SPESState:
        # the global average is loaded into the initial model: its experts must not be
        # the frozen ones the workers read
        _privatise(client.model, shared.all_experts(), trainable=False)
        return SPESState()

    # ------------------------------------------------------------------ the round
    @phase(role=WORKER)
    def local(self, client: Client[SPESState], inbox: Inbox,
              ctx: PhaseContext) -> list[Message]:
        shared: SPESProcess = ctx.shared
        live = dict(client.model.named_parameters())
        start = {n: live[n].detach().clone() for n in shared.phi_names}
        client.stats["loss"] = local_steps(client, client.state.optimizer, ctx.task,
                                           self.cfg.local_steps, self.cfg.batch_size,
                                           self.cfg, ctx.round,
            runner=ctx.runner)
        upload = {n: start[n] - live[n].detach() for n in shared.phi_names}  # Δφ_i
        upload.update({n: live[n].detach().clone() for n in shared.own(client.cid)})
        return [Message(client.cid, SERVER, "update", upload)]

    @phase(role=SERVER_ROLE)
    @torch.no_grad()
    def aggregate(self, client: Client[SPESState], inbox: Inbox,
                  ctx: PhaseContext) -> list[Message]:
        shared: SPESProcess = ctx.shared
        live = dict(client.model.named_parameters())
        arrived = inbox.newest("update")
        if arrived:  # φ: one outer step on the mean Δφ (under faults, of those that came)
            if self.rule is None:
                for name in shared.phi_names:
                    live[name].grad = sum(m.payload[name] for m in arrived.values()) / len(
                        arrived)
            else:  # or the robust rule's Δφ (an expert has one owner: taken as sent)
                phi = {name: live[name] for name in shared.phi_names}
                uploads = [{n: m.payload[n] for n in phi} for m in arrived.values()]
                for name, g in self.combine(self.rule, uploads, phi).items():
                    live[name].grad = g
            client.state.outer.step()
            for src, msg in arrived.items():  # each expert from its owner
                for name in shared.own(src):
                    live[name].copy_(msg.payload[name])
        alpha = self.merge_strength(ctx.round)
        if alpha > 0:
            for layer in client.model.modules():
                if isinstance(layer, SplitExperts):
                    merge_layer(layer, self.cfg.merge_top_k, alpha,
                                self.cfg.merge_task_vectors, self.cfg.merge_similarity)
            client.stats["merge_alpha"] = alpha
        snapshot = {n: p.detach().clone() for n, p in live.items()}
        return self.to_neighbours(client, ctx, "global", snapshot)

    def merge_strength(self, round_: int) -> float:
        """α_t after the sync that ends inner step t = (round + 1)·H; 0 when no merge is due."""
        cfg = self.cfg
        t = (round_ + 1) * cfg.local_steps
        if t >= cfg.merge_warmup_steps or t % cfg.merge_every:
            return 0.0
        return cfg.merge_alpha * (1 - t / cfg.merge_warmup_steps)

    @phase(role=WORKER)
    @torch.no_grad()
    def sync(self, client: Client[SPESState], inbox: Inbox, ctx: PhaseContext) -> None:
        msg = inbox.newest("global").get(SERVER)
        if msg is None:  # lost: the worker keeps the model it has
            return
        shared: SPESProcess = ctx.shared
        frozen = shared.frozen
        if msg.sent_round not in frozen.versions:  # the first hosted worker to receive it
            frozen.versions[msg.sent_round] = {
                n: torch.nn.Parameter(msg.payload[n].clone(), requires_grad=False)
                for n in shared.all_experts()}
        self._hold(client, shared, msg.sent_round)
        _load(client.model, msg.payload, skip=shared.frozen_of(client.cid))

    # ------------------------------------------------------------------ frozen experts
    def _hold(self, client: Client[SPESState], shared: SPESProcess, key: int) -> None:
        """Point the worker's frozen experts at version ``key``; forget versions nobody
        holds any more."""
        frozen = shared.frozen
        version = frozen.versions[key]
        for name in sorted(shared.frozen_of(client.cid)):
            if not isinstance(version[name], torch.nn.Parameter):  # restored from disk
                version[name] = torch.nn.Parameter(version[name], requires_grad=False)
            _set_parameter(client.model, name, version[name])
        frozen.holders[client.cid] = key
        for stale in set(frozen.versions) - set(frozen.holders.values()):
            del frozen.versions[stale]

    def shared_tensors(self, shared: SPESProcess) -> SharedTensors:
        """The versions of the frozen experts, held once per process; after a restore each
        worker is pointed at its version again. The initial model's experts are the
        evaluated global model's (``init_eval_state``), written at every evaluation."""

        def relink(clients: Sequence[Client[Any]]) -> None:
            for client in clients:
                if client.cid in shared.frozen.holders:
                    self._hold(client, shared, shared.frozen.holders[client.cid])

        held = tuple(t for version in shared.frozen.versions.values() for t in version.values())
        return SharedTensors(frozen="private", tensors=held, relink=relink)

    def bootstrap(self, client: Client[SPESState], vector: np.ndarray | None,
                  shared: SPESProcess) -> None:
        """A joining worker: fresh optimiser; its private tensors from ``vector``, its
        frozen experts the process's version equal to ``vector``'s, or a new one."""
        client.state = self.init_state(client, shared)
        if vector is None:
            return
        values = {n: v.to(client.device)
                  for n, v in params.unflatten(client.model, vector, frozen=True).items()}
        frozen = shared.frozen
        experts = shared.all_experts()
        key = next((k for k, version in frozen.versions.items()
                    if all(torch.equal(version[n], values[n]) for n in experts)), None)
        if key is None:
            key, frozen.next_key = frozen.next_key, frozen.next_key - 1
            frozen.versions[key] = {n: torch.nn.Parameter(values[n], requires_grad=False)
                                    for n in experts}
        self._hold(client, shared, key)
        _load(client.model, values, skip=shared.frozen_of(client.cid))

    # ------------------------------------------------------------------ the model vector
    def state_vector(self, client: Client[SPESState]) -> np.ndarray:
        """Every parameter, φ and all experts, in the model's order (the same for every
        client, whichever experts it trains)."""
        return params.flat_vector(client.model, frozen=True)

    def load_state_vector(self, client: Client[SPESState], vector: np.ndarray) -> None:
        """Into a model whose every parameter is its own (the server, the evaluated global
        average); a joining worker goes through :meth:`bootstrap`."""
        params.load_flat(client.model, vector, frozen=True)


def _set_parameter(model: torch.nn.Module, name: str, value: torch.nn.Parameter) -> None:
    module, _, attr = name.rpartition(".")
    setattr(model.get_submodule(module), attr, value)


def _privatise(model: torch.nn.Module, names: list[str], trainable: bool) -> None:
    """Give the model its own copy of the parameters ``names`` (they may be shared)."""
    live = dict(model.named_parameters())
    for name in names:
        _set_parameter(model, name, torch.nn.Parameter(live[name].detach().clone(),
                                                       requires_grad=trainable))


@torch.no_grad()
def _load(model: torch.nn.Module, values: dict[str, torch.Tensor],
          skip: frozenset[str] = frozenset()) -> None:
    """Copy ``values`` into the model's parameters but those named in ``skip``."""
    for name, p in model.named_parameters():
        if name not in skip:
            p.copy_(values[name])
