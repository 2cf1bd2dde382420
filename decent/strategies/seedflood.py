"""SeedFlood (Kim & Lee) — Algorithm 1 of ``seeds/seedflood.txt``.

Per iteration t, every client i:
  1. (every τ iterations) all clients refresh the shared subspace from s_glob + t;
  2. samples a minibatch and a fresh seed s_{i,t}; estimates α_{i,t} with SubCGE (or
     dense MeZO); its update is the message (s_{i,t}, c = η α_{i,t} / n);
  3. floods: for k hops (k = diameter D by default) it sends every message it saw for the
     first time in the previous hop to all its neighbours, drops messages already seen,
     and applies every message exactly once, its own included:  θ ← θ − c·z(s).

With k = D every client has applied all n updates of iteration t by its end: the replicas
are the same model ("perfect consensus") on any connected graph. With k < D (delayed
flooding) messages still in flight go on in the next iteration, arriving at most
⌈D/k⌉ iterations late.

Wire size of a message: an 8-byte seed and a 4-byte float32 coefficient = 12 bytes. Every
client forwards each message once to each neighbour, so each directed edge carries
12·n bytes per iteration.

Platform choices (documented in the README):
* messages received in an iteration are applied at its end, sorted by seed, so replicas
  that received the same messages are bit-for-bit identical whatever the arrival order;
  the iteration tag and origin ride in the message header (``meta``), not in the 12 bytes;
* subspace refresh under delayed flooding **drains**: the iteration before a refresh runs
  D − k extra hops, so no message of the old subspace is still in flight; each process then
  rebuilds A from the updates since the last refresh in canonical order (iteration, seed),
  folds U A Vᵀ into the weights its replicas share, and zeroes every replica's A (see
  ``decent.zo.estimators.SubCGE.refresh``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from decent.platform.errors import ConfigError
from decent.platform.messages import Message, Scalar, Seed
from decent.strategies.base import Client, PhaseContext, Strategy
from decent.strategies.zo_local import draw_seed
from decent.topologies import Topology
from decent.zo.estimators import DenseMeZO, SubCGE

ESTIMATORS = ("subcge", "mezo")


@dataclass
class SeedFloodConfig:
    name: str = "seedflood"
    lr: float = 1e-5  # η; the paper's grid {1e-5, 1e-6}
    eps: float = 1e-3  # ε of the two-point estimate
    batch_size: int = 16
    estimator: str = "subcge"  # subcge | mezo
    rank: int = 64  # SubCGE rank r (paper: 64 for OPT-125M, 32 for OPT-1.3B)
    refresh_every: int = 0  # τ: 0 = never (the paper's OPT-125M setting τ = 5000)
    subspace_seed: int = 0  # s_glob
    hops: int = 0  # k flood hops per iteration; 0 = the graph's diameter
    log_messages: bool = False  # record (origin, iteration sent, iteration applied)

    def validate(self, prefix: str = "strategy") -> None:
        for key in ("lr", "eps"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"{prefix}.{key}", f"must be > 0 (got {getattr(self, key)})")
        if self.estimator not in ESTIMATORS:
            raise ConfigError(f"{prefix}.estimator", f"choose one of: {', '.join(ESTIMATORS)}")
        for key, least in (("batch_size", 1), ("rank", 1), ("refresh_every", 0), ("hops", 0)):
            if getattr(self, key) < least:
                raise ConfigError(f"{prefix}.{key}", f"must be ≥ {least}")


class SeedFlood(Strategy):
    name = "seedflood"
    Config = SeedFloodConfig

    def __init__(self, cfg: SeedFloodConfig, n: int) -> None:
        super().__init__(cfg, n)
        self.zo = SubCGE(cfg.rank, cfg.subspace_seed) if cfg.estimator == "subcge" \
            else DenseMeZO()
        self.diameter = 0
        self.k = 0
        # every update applied in this process since the last refresh: seed → (t, coef)
        self.history: dict[int, tuple[int, float]] = {}
        self.sent: list[tuple[int, float]] = []  # own updates, when log_messages is on

    # ------------------------------------------------------------------ set-up
    def check_topology(self, topology: Topology) -> None:
        if topology.time_varying:
            raise ConfigError("topology.name", "seedflood floods over a static connected "
                              f"graph; '{topology.name}' is redrawn every round")
        self.diameter = topology.diameter()
        self.k = self.cfg.hops or self.diameter
        if self.k > self.diameter and self.n > 1:
            raise ConfigError("strategy.hops", f"{self.k} hops exceed the graph's diameter "
                              f"{self.diameter}: use 0 (= diameter) or fewer")

    def hops(self, round_: int) -> int:
        """k, plus D − k drain hops in the iteration before a subspace refresh."""
        tau = self.cfg.refresh_every
        if tau and self.cfg.estimator == "subcge" and (round_ + 1) % tau == 0:
            return max(self.k, self.diameter)
        return self.k

    def phases(self, round_: int) -> list[str]:
        return ["compute"] + [f"hop:{j}" for j in range(1, self.hops(round_) + 1)]

    def prepare_model(self, model: torch.nn.Module) -> None:
        self.zo.prepare_base(model)

    def init_client(self, client: Client) -> None:
        self.zo.init_replica(client.model)
        client.state.update(seen={}, queue=[], log=[])

    def begin_phase(self, round_: int, phase: str, clients: Sequence[Client]) -> None:
        tau = self.cfg.refresh_every
        if phase == "compute" and tau and round_ > 0 and round_ % tau == 0:
            by_round: dict[int, list[tuple[int, float]]] = {}
            for seed, (t, coef) in self.history.items():
                by_round.setdefault(t, []).append((seed, coef))
            history = [sorted(by_round[t]) for t in sorted(by_round)]
            self.zo.refresh([c.model for c in clients], self.cfg.subspace_seed + round_,
                            history)
            self.history = {}

    # ------------------------------------------------------------------ phases
    def run_phase(self, phase: str, client: Client, inbox: list[Message],
                  ctx: PhaseContext) -> list[Message]:
        fresh = self.receive(client, inbox, ctx.round)
        if phase == "compute":
            self.apply_queue(client, ctx.round)  # late arrivals first (delayed flooding)
            fresh.append(self.own_update(client, ctx))
        if phase == f"hop:{self.hops(ctx.round)}" or (phase == "compute" and
                                                       self.hops(ctx.round) == 0):
            self.apply_queue(client, ctx.round)
        return [Message(client.cid, j, "flood", (Seed(seed), Scalar(coef)), meta=(origin, t))
                for (seed, coef, origin, t) in fresh for j in ctx.graph.neighbors[client.cid]]

    def receive(self, client: Client, inbox: list[Message], round_: int) -> list[tuple]:
        """Messages seen for the first time: queued for application, to be forwarded."""
        seen: dict[int, set[int]] = client.state["seen"]
        fresh = []
        for msg in inbox:
            seed, coef = msg.payload[0].value, msg.payload[1].value
            origin, t = msg.meta
            if seed in seen.setdefault(t, set()):
                continue
            seen[t].add(seed)
            fresh.append((seed, coef, origin, t))
            client.state["queue"].append((seed, coef, origin, t))
        # a message can arrive no later than ⌈D/k⌉ iterations after it was sent
        horizon = round_ - math.ceil(self.diameter / max(self.k, 1)) - 2
        for t in [t for t in seen if t < horizon]:
            del seen[t]
        return fresh

    @torch.no_grad()
    def own_update(self, client: Client, ctx: PhaseContext) -> tuple:
        model = client.model
        model.eval()
        batch = client.data.sample(self.cfg.batch_size, client.generator)
        seed = draw_seed(client)
        losses: list[float] = []

        def loss_fn() -> float:
            losses.append(float(ctx.task.loss(model, batch)))
            return losses[-1]

        alpha = self.zo.estimate(model, loss_fn, seed, self.cfg.eps)
        client.stats["loss"] = sum(losses) / len(losses)
        # the coefficient travels as float32: every client, the sender too, applies that
        coef = float(np.float32(self.cfg.lr * alpha / self.n))
        update = (seed, coef, client.cid, ctx.round)
        client.state["seen"].setdefault(ctx.round, set()).add(seed)
        client.state["queue"].append(update)
        if self.cfg.log_messages:
            self.sent.append((seed, coef))
        return update

    def apply_queue(self, client: Client, round_: int) -> None:
        queue = sorted(client.state["queue"])  # by seed: arrival order must not matter
        if not queue:
            return
        self.zo.apply(client.model, [(seed, coef) for seed, coef, _, _ in queue])
        if self.cfg.refresh_every:
            self.history.update((seed, (t, coef)) for seed, coef, _, t in queue)
        if self.cfg.log_messages:
            client.state["log"].extend((origin, t, round_) for _, _, origin, t in queue)
        client.state["queue"] = []

    # ------------------------------------------------------------------ state
    def state_vector(self, model: torch.nn.Module) -> np.ndarray:
        return self.zo.state_vector(model)

    def load_state_vector(self, model: torch.nn.Module, vector: np.ndarray) -> None:
        self.zo.load_state_vector(model, vector)
