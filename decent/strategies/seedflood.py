"""SeedFlood (Kim & Lee) — Algorithm 1 of ``seeds/seedflood.txt``, with §4.5's delayed flooding.

Per iteration t, every client i:
  1. (every τ iterations) all clients refresh the shared subspace from s_glob + t;
  2. samples a minibatch and a fresh seed s_{i,t}; estimates α_{i,t} with SubCGE (or
     dense MeZO); its update is the message (s_{i,t}, c = η α_{i,t} / n);
  3. floods with k sends (k = diameter D by default): at send 1 it sends its own message
     (and what it first saw at the previous iteration's last send) to all neighbours; at
     send j + 1 it forwards what it first saw at send j; messages already seen are
     dropped; every message is applied exactly once, its own included:  θ ← θ − c·z(s).

A message travels at most D hops (the diameter, which Algorithm 1 already assumes known):
a client does not forward a message that has travelled D hops, since every client has it
by then. So with k = D every client applies all n updates of iteration t by its end and
no send carries only duplicates — the replicas are the same model ("perfect consensus") on
any connected graph. With k < D (delayed flooding) a message first seen at the last send
of an iteration is forwarded at the first send of the next one; an update made in
iteration t reaches hop distance d during iteration t + ⌈d/k⌉ − 1 and is applied at its
end: staleness ⌈d/k⌉ − 1, within the paper's bound ⌈D/k⌉.

The phases of an iteration with k sends: ``compute`` (estimate, send 1), ``forward``
(k − 1 times: sends 2..k), ``apply`` (take in send k, apply everything seen this
iteration). Wire size of an update: an 8-byte seed and a 4-byte float32 coefficient = 12
bytes; origin, iteration and hop count ride in the (uncounted) header. What a client sends
one neighbour at one send travels as one message bundling its updates (12 bytes each, and
counted as that many messages): n updates per iteration cross every edge, so per-update
messages would make the simulation's own work grow as n² objects.

Platform choices (documented in docs/methods/seedflood.md):
* messages are applied at the end of the iteration in which they arrive, sorted by seed,
  so replicas that received the same messages in the same iterations are bit-for-bit
  identical whatever the arrival order;
* subspace refresh under delayed flooding **drains**: the iteration before a refresh
  makes D sends (not k), so no message of the old subspace is still in flight; each
  process then rebuilds A from the updates since the last refresh in canonical order
  (iteration, seed), folds U A Vᵀ into the weights its replicas share, and zeroes every
  replica's A (see ``decent.zo.estimators.SubCGE.refresh``).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from decent.core.errors import ConfigError
from decent.core.graph import GraphFacts
from decent.core.messages import Message
from decent.core.schema import at_least, one_of, positive, seed_field
from decent.core.stats import Max, Mean
from decent.core.storable import storable
from decent.strategies.base import Client, PhaseContext, SharedTensors, Strategy
from decent.strategies.config import StrategyConfig
from decent.strategies.inbox import Inbox
from decent.strategies.phases import phase
from decent.strategies.zo_estimate import zo_estimate
from decent.zo.estimators import DenseMeZO, Replica, SubCGE, Update
from decent.zo.seeds import draw_seed
from decent.zo.subcge import LAYER_SETS

ESTIMATORS = ("subcge", "mezo")


@dataclass
class SeedFloodConfig(StrategyConfig):
    name: str = "seedflood"
    lr: float = positive(1e-5)  # η; the paper's grid {1e-5, 1e-6}
    eps: float = positive(1e-3)  # ε of the two-point estimate
    batch_size: int = at_least(1, 16)  # examples per zeroth-order estimate
    # subcge: SubCGE's low-rank perturbations; mezo: dense Gaussian ones
    estimator: str = one_of(ESTIMATORS, "subcge")
    rank: int = at_least(1, 64)  # SubCGE rank r (paper: 64 for OPT-125M, 32 for OPT-1.3B)
    # SubCGE's weights: all_2d every 2-D layer (Algorithm 1; embeddings, a head tied to them
    # with them), linear every Linear but the head (embeddings and head frozen)
    layers: str = one_of(LAYER_SETS, "all_2d")
    refresh_every: int = at_least(0, 0)  # τ: 0 = never (the paper's OPT-125M τ = 5000)
    subspace_seed: int = seed_field(0)  # s_glob
    # k flooding sends per iteration; 0 = the graph's diameter D (more than D: clamped to D)
    hops: int = at_least(0, 0)
    log_messages: bool = False  # record (origin, iteration sent, iteration applied)

    def examples_per_step(self) -> int:
        return self.batch_size

    def validate(self, prefix: str = "strategy") -> None:
        if self.estimator == "mezo" and self.layers != "all_2d":
            raise ConfigError(f"{prefix}.layers", f"{self.layers} chooses SubCGE's weights; "
                              "estimator mezo perturbs every trainable tensor: leave layers "
                              "at all_2d or use estimator subcge")


@storable
@dataclass(frozen=True)
class Flooded:
    """Updates as a client holds them, one array entry per update: the 12 bytes (seed,
    float32 coefficient) and the header (origin, the iteration it was made in, the hops
    it has travelled to reach this client)."""

    seed: np.ndarray  # int64
    coef: np.ndarray  # float32
    origin: np.ndarray  # int64
    t: np.ndarray  # int64
    hop: np.ndarray  # int64

    @staticmethod
    def one(seed: int, coef: float, origin: int, t: int) -> Flooded:
        """A client's own update, not yet sent (hop 0)."""
        return Flooded(np.array([seed], np.int64), np.array([coef], np.float32),
                       np.array([origin], np.int64), np.array([t], np.int64),
                       np.zeros(1, np.int64))

    @staticmethod
    def join(parts: Sequence[Flooded]) -> Flooded:
        """``parts`` end to end, in order."""
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return Flooded(*(np.zeros(0, d) for d in (np.int64, np.float32, np.int64,
                                                      np.int64, np.int64)))
        return Flooded(*(np.concatenate([getattr(p, f) for p in parts]) for f in FIELDS))

    def take(self, keep: np.ndarray) -> Flooded:
        """The updates at ``keep`` (a mask or indices), in that order."""
        return Flooded(*(getattr(self, f)[keep] for f in FIELDS))

    def __len__(self) -> int:
        return len(self.seed)


FIELDS = ("seed", "coef", "origin", "t", "hop")
ITEM_BYTES = 8 + 4 + 3 * 8  # an update as held and sent: seed, coefficient, header
SEEN_BYTES = 8  # a seed seen, kept to drop its duplicates


@dataclass
class SeedFloodState:
    replica: Replica  # the estimator's private state of this client's model
    # iteration → the seeds seen of its updates, sorted
    seen: dict[int, np.ndarray] = field(default_factory=dict)
    queue: list[Flooded] = field(default_factory=list)  # seen this iteration, not applied
    carry: list[Flooded] = field(default_factory=list)  # for the next iteration's send 1
    # with log_messages: (origin, iteration made, iteration applied) of every update
    # applied, and (seed, coefficient) of the client's own updates
    log: list[tuple[int, int, int]] = field(default_factory=list)
    sent: list[Update] = field(default_factory=list)


@storable
@dataclass
class SeedFloodProcess:
    """What the clients of one process share: the estimator (SubCGE's basis and the frozen
    weights) and every update applied here since the last subspace refresh."""

    estimator: DenseMeZO | SubCGE
    history: dict[int, tuple[int, float]] = field(default_factory=dict)  # seed → (t, c)


class SeedFlood(Strategy[SeedFloodState]):
    name = "seedflood"
    Config = SeedFloodConfig
    State = SeedFloodState
    # a chunk's ±ε evaluations run as one computation (decent.engine.stacked_zo)
    batchable = True

    def __init__(self, cfg: SeedFloodConfig, graph: GraphFacts) -> None:
        super().__init__(cfg, graph)
        if graph.time_varying or graph.diameter is None:
            raise ConfigError("topology.name", "seedflood floods over a static connected "
                              f"graph; '{graph.name}' is redrawn every round")
        self.diameter = graph.diameter  # D
        self.k = cfg.hops or self.diameter
        if self.k > self.diameter and graph.n > 1:
            # after D sends every client holds every update: more sends would carry nothing
            # (SeedFlood-8step on a 16-client meshgrid, D = 6, is SeedFlood with D sends)
            print(f"strategy.hops: {self.k} sends an iteration clamped to the graph's diameter "
                  f"{self.diameter} (every update has reached every client by then)",
                  file=sys.stderr)
            self.k = self.diameter
        # an update of iteration t is last received (at hop D) in iteration t + lag
        self.lag = math.ceil(self.diameter / self.k) - 1 if self.diameter else 0

    @property
    def zo_estimator(self) -> str:
        """Which perturbations its estimates use (what batched execution must stack)."""
        return str(self.cfg.estimator)

    # ------------------------------------------------------------------ schedule
    def sends(self, round_: int) -> int:
        """k, or D in the iteration before a subspace refresh (the drain)."""
        tau = self.cfg.refresh_every
        if tau and self.cfg.estimator == "subcge" and (round_ + 1) % tau == 0:
            return max(self.k, self.diameter)
        return self.k

    def phases(self, round_: int) -> tuple[str, ...]:
        return ("compute", *("forward",) * max(self.sends(round_) - 1, 0), "apply")

    # ------------------------------------------------------------------ set-up
    def init_process(self, model: torch.nn.Module) -> SeedFloodProcess:
        cfg = self.cfg
        estimator = SubCGE(cfg.rank, cfg.subspace_seed, cfg.layers) \
            if cfg.estimator == "subcge" \
            else DenseMeZO()
        estimator.prepare_base(model)
        return SeedFloodProcess(estimator)

    def churn_problem(self, client: int, kind: str) -> str | None:
        return ("flooding relays every update over a fixed graph of known diameter, and "
                "applies each exactly once: a missing relay leaves replicas apart for good")

    def traffic_bytes(self, cid: int, degree: int, trainable: int) -> tuple[int, int]:
        """Flooding holds, per client, the seeds seen (8 bytes each) of the iterations an
        update can still arrive from and of the one before (dropped at the end of the
        apply phase) and, by the apply phase, every update of the iteration (its 12 bytes
        and 24 of header); a send bundles at most all of them, to each neighbour. O(n) a
        client: the one part of SeedFlood's memory that grows with the number of clients."""
        n, held = self.n, ITEM_BYTES
        return n * (SEEN_BYTES * (self.lag + 2) + held), degree * n * held

    def shared_tensors(self, shared: SeedFloodProcess) -> SharedTensors:
        # a subspace refresh folds U A Vᵀ into the frozen W the replicas share
        refreshed = self.cfg.estimator == "subcge" and self.cfg.refresh_every > 0
        return SharedTensors(frozen="written" if refreshed else "read_only")

    def init_state(self, client: Client[SeedFloodState],
                   shared: SeedFloodProcess) -> SeedFloodState:
        return SeedFloodState(replica=shared.estimator.init_replica(client.model))

    def init_eval_state(self, client: Client[SeedFloodState],
                        shared: SeedFloodProcess) -> SeedFloodState:
        return self.init_state(client, shared)

    def begin_phase(self, ctx: PhaseContext, clients: Sequence[Client[SeedFloodState]]) -> None:
        tau, t = self.cfg.refresh_every, ctx.round
        if ctx.phase == "compute" and tau and t > 0 and t % tau == 0:
            shared: SeedFloodProcess = ctx.shared
            by_round: dict[int, list[Update]] = {}
            for seed, (made, coef) in shared.history.items():
                by_round.setdefault(made, []).append((seed, coef))
            history = [sorted(by_round[made]) for made in sorted(by_round)]
            shared.estimator.refresh([c.model for c in clients],
                                     [c.state.replica for c in clients],  # type: ignore[misc]
                                     self.cfg.subspace_seed + t, history)
            shared.history.clear()

    # ------------------------------------------------------------------ phases
    @phase()
    def compute(self, client: Client[SeedFloodState], inbox: Inbox,
                ctx: PhaseContext) -> list[Message]:
        """(B) estimate α on a fresh batch and seed; send 1 of the flooding."""
        state = client.state
        own = self.own_update(client, ctx)
        self.see(state, own)
        outgoing, state.carry = Flooded.join([own, *state.carry]), []
        return self.send(client, ctx, outgoing)

    @phase()
    def forward(self, client: Client[SeedFloodState], inbox: Inbox,
                ctx: PhaseContext) -> list[Message]:
        """Sends 2..k: forward what was first seen at the previous send."""
        return self.send(client, ctx, self.receive(client.state, inbox))

    @phase()
    def apply(self, client: Client[SeedFloodState], inbox: Inbox,
              ctx: PhaseContext) -> None:
        """Take in send k; keep what is still travelling for the next iteration's send 1;
        apply every update seen this iteration."""
        state = client.state
        last = self.receive(state, inbox)
        state.carry = [last.take(last.hop < self.diameter)]
        queue = Flooded.join(state.queue)
        # arrival order must not matter: by seed (a stable sort, as Python's)
        queue = queue.take(np.argsort(queue.seed, kind="stable"))
        state.queue = []
        seeds, coefs = queue.seed.tolist(), queue.coef.tolist()  # the float32 values exactly
        ctx.shared.estimator.apply(state.replica, list(zip(seeds, coefs, strict=True)))
        if self.cfg.refresh_every:
            ctx.shared.history.update(zip(seeds, zip(queue.t.tolist(), coefs, strict=True),
                                          strict=True))
        staleness = ctx.round - queue.t
        client.stats["staleness_mean"] = Mean(float(staleness.sum()), len(staleness))
        client.stats["staleness_max"] = Max(float(staleness.max()))
        if self.cfg.log_messages:
            state.log.extend((o, t, ctx.round) for o, t in zip(
                queue.origin.tolist(), queue.t.tolist(), strict=True))
        # an update of iteration t arrives (hop D) by iteration t + lag: older seed sets
        # can no longer be needed to drop a duplicate
        for made in [made for made in state.seen if made < ctx.round - self.lag]:
            del state.seen[made]

    # ------------------------------------------------------------------ helpers
    @torch.no_grad()
    def own_update(self, client: Client[SeedFloodState], ctx: PhaseContext) -> Flooded:
        model = client.model
        model.eval()
        batch = client.data.sample(self.cfg.batch_size, client.generator)
        seed = draw_seed(client.generator)
        # batched execution evaluates a chunk's estimates in one computation
        alpha, losses = zo_estimate(client, ctx.shared.estimator, client.state.replica,
                                    ctx.task, batch, seed, self.cfg.eps, ctx.runner)
        client.count_steps(1)
        client.stats["loss"] = sum(losses) / len(losses)
        # the coefficient travels as float32: every client, the sender too, applies that
        coef = float(np.float32(self.cfg.lr * alpha / self.n))
        if self.cfg.log_messages:
            client.state.sent.append((seed, coef))
        return Flooded.one(seed, coef, client.cid, ctx.round)

    @staticmethod
    def see(state: SeedFloodState, arrived: Flooded) -> Flooded:
        """Record the updates of ``arrived`` (in arrival order); what it holds that was
        not seen before, queued for application — the first copy of each, the others
        duplicates to drop."""
        if not len(arrived):
            return arrived
        # first copies within the arrival: by (iteration, seed), kept in arrival order
        # (the updates of one send are almost always of one iteration: by seed alone)
        one_t = bool((arrived.t == arrived.t[0]).all())
        key = arrived.seed if one_t else np.stack([arrived.t, arrived.seed], axis=1)
        _, first = np.unique(key, axis=None if one_t else 0, return_index=True)
        fresh = arrived if len(first) == len(arrived) else arrived.take(np.sort(first))
        keep = np.ones(len(fresh), dtype=bool)
        for t in np.unique(fresh.t).tolist():
            of_t = fresh.t == t
            seen = state.seen.get(t, np.zeros(0, np.int64))
            keep[of_t] = ~np.isin(fresh.seed[of_t], seen, assume_unique=True)
            state.seen[t] = np.union1d(seen, fresh.seed[of_t & keep])
        fresh = fresh.take(keep)
        if len(fresh):
            state.queue.append(fresh)
        return fresh

    def receive(self, state: SeedFloodState, inbox: list[Message]) -> Flooded:
        """The updates of ``inbox`` seen for the first time (queued for application)."""
        parts = []
        for msg in inbox:
            seeds, coefs = msg.payload
            origin, t, hop = msg.meta
            # entries pair with the header by position; a payload a Byzantine sender
            # replayed from an older send may be shorter or longer: the pairs there are
            k = min(len(seeds), len(origin))
            parts.append(Flooded(seeds[:k], coefs[:k], origin[:k], t[:k], hop[:k]))
        return self.see(state, Flooded.join(parts))

    def send(self, client: Client[SeedFloodState], ctx: PhaseContext,
             updates: Flooded) -> list[Message]:
        """The updates that have travelled fewer than D hops, to every neighbour: one
        message per neighbour bundling them (12 bytes an update)."""
        out = updates.take(updates.hop < self.diameter)
        if not len(out):
            return []
        return self.to_neighbours(client, ctx, "flood", (out.seed, out.coef),
                                  meta=(out.origin, out.t, out.hop + 1), items=len(out))

    # ------------------------------------------------------------------ state
    def state_vector(self, client: Client[SeedFloodState]) -> np.ndarray:
        return client.state.replica.vector()

    def load_state_vector(self, client: Client[SeedFloodState], vector: np.ndarray) -> None:
        client.state.replica.load_vector(vector)
