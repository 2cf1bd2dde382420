"""DSO — decentralized semantic optimisation on two tiers (Zen LM technical report).

The graph is ``two_tier``: aggregators 0..A−1 on a complete overlay, each worker linked to
the aggregator nearest by latency. A round is one optimisation step:

  compute    worker: g = ∇ loss on a batch of its shard;
             DP (honest workers): clip g to norm C, add N(0, σ²I),
             σ = C·sqrt(2 ln(1.25/δ)) / (ε·N);
             semantic compression with error feedback: g' = g + e, keep the top `keep` of
             |g'| ⊙ s per tensor (s: activation sensitivity on the probe set — the task's
             public held-out split, the same batches for every worker — recomputed every
             `sensitivity_every` steps), INT8 on the kept values, e ← g' − D(payload);
             commitment c = SHA3-256(payload ‖ nonce) → its aggregator          (32 B)
  reveal     worker: payload and nonce → its aggregator
  aggregate  aggregator: drop every payload whose commitment does not verify; robust
             aggregate of the rest (`aggregator`: trimmed mean β, median, mean, Krum);
             compress it the same way (Top-k + INT8, error feedback) into G = {ĝ_a};
             gossip round 1: push G to `fanout` random other aggregators
  answer     aggregator: merge the pushes that came; answer each aggregator that pushed to
             it (and that it did not push to itself) with the G it held when the round
             began — the pull half of the exchange "send G to p, receive G_p from p"
  gossip     (rounds 2..R) aggregator: merge the answers (round k − 1 complete); push G to
             `fanout` new random peers; then an `answer` phase as above
  apply      aggregator: merge the answers of round R; g_agg = the `top_aggregator` rule
             over G (the mean by default: aggregators are trusted unless listed Byzantine;
             `weighted_mean` weighs ĝ_a by the workers a aggregated); one optimiser step;
             send G to its workers
  sync       worker: the same g_agg from the same G; the same step

so every client holds the same model whenever the gossip covered every aggregator. One
gossip round is the push-pull exchange of epidemic broadcast (Demers et al. 1987) between
the sets held at the round's start; its expected coverage is :func:`push_pull_coverage`.

A Byzantine worker runs its own code: its attack (``ctx.tamper``) acts on the gradient it
commits to, unclipped and un-noised — only honest workers apply DP — so its commitment
verifies and only robust aggregation can stop it; ``forge`` commits honestly and changes
the payload after committing.

``asynchronous``: a round is one tick of the reference device's step time, and nobody
waits for a slow worker. A worker of speed factor s (``compute.speeds`` /
``compute.speed_spread``) needs p = ⌈1/s⌉ ticks per gradient: it takes the gradient of
the model it holds when it starts, and commits and reveals it p − 1 ticks later (the
gradient of a model that is p − 1 steps old); in between it sends nothing, and its
aggregator aggregates what has arrived. The reveal carries the step the gradient was
taken at (8 B), and the aggregators report the mean age of what they aggregate
(``staleness``). With every s ≥ 1 it is the synchronous method, step for step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from decent.compression.base import Identity
from decent.compression.error_feedback import ErrorFeedback
from decent.compression.topk import TopK, TopKInt8
from decent.core.errors import ConfigError
from decent.core.graph import GraphFacts
from decent.core.messages import Message
from decent.core.schema import at_least, in_range, one_of, positive
from decent.core.stats import Max, Mean
from decent.models import params
from decent.models.sensitivity import activation_sensitivity
from decent.privacy.gaussian import DPConfig, PrivacyLedger, add_noise_, clip_, noise_std
from decent.robust.aggregators import AGGREGATORS, aggregate, weighted_mean
from decent.robust.commitment import commitment, draw_nonce, verifies
from decent.strategies.base import Client, PhaseContext, Strategy
from decent.strategies.local_training import (
    OPTIMIZERS,
    adamw_betas,
    check_betas,
    make_optimizer,
)

TOP_AGGREGATORS = (*AGGREGATORS, "weighted_mean")
PROBES = ("public", "private")
PROBE_SEED = 0  # the public probe batches' generator: the same for every worker
SERVED = "served"  # with weighted_mean: the key of ĝ_a's count in G (no parameter's name)


@dataclass
class DSOConfig:
    name: str = "dso"
    batch_size: int = at_least(1, 8)
    optimizer: str = one_of(OPTIMIZERS, "sgd")  # the step every client takes with g_agg
    lr: float = positive(0.05)
    momentum: float = in_range(0.0, 0, 1, hi_open=True)  # SGD's
    betas: list[float] = adamw_betas()
    weight_decay: float = at_least(0, 0.0)
    aggregator: str = one_of(AGGREGATORS, "trimmed_mean")  # over an aggregator's workers
    # over G, one aggregate per aggregator: the aggregators are not Byzantine unless
    # faults.byzantine lists one, so a plain mean by default (robust rules there would
    # discard honest aggregators' signal, e.g. the extremes of non-IID tiers);
    # `weighted_mean` weighs each ĝ_a by the payloads a aggregated that round (those that
    # verified), so a worker counts the same whatever the size of its tier
    top_aggregator: str = one_of(TOP_AGGREGATORS, "mean")
    trim: float = in_range(0.1, 0, 0.5, hi_open=True)  # β per side (and Krum's f / m)
    verify_commitments: bool = True
    # what travels: Top-k + INT8 (DSO's), Top-k with fp32 values, or dense fp32 (`keep`,
    # `semantic` unused); every one with error feedback
    compression: str = one_of(("topk_int8", "topk", "none"), "topk_int8")
    keep: float = in_range(0.01, 0, 1, lo_open=True)  # Top-k fraction per tensor
    semantic: bool = True  # rank by |g'| ⊙ s (false: by |g'|)
    # where s comes from: `public`, the task's held-out split, the same probe batches for
    # every worker (the report's fixed public probe set); `private`, the worker's own shard,
    # which decides the kept indices — they travel un-noised, so DP refuses it
    probe: str = one_of(PROBES, "public")
    sensitivity_every: int = at_least(1, 1000)
    probe_batches: int = at_least(1, 4)
    fanout: int = at_least(1, 4)
    gossip_rounds: int = at_least(1, 3)
    asynchronous: bool = False  # workers of different speeds, nobody waits (see above)
    dp: DPConfig = field(default_factory=DPConfig)

    def validate(self, prefix: str = "strategy") -> None:
        check_betas(self.betas, prefix)
        if (self.dp.enabled and self.probe == "private" and self.semantic
                and self.compression != "none"):
            raise ConfigError(f"{prefix}.probe", "a private probe decides which entries are "
                              "kept and the indices are not noised, so DP would not bound "
                              "what they leak: use probe=public (or semantic=false)")


@dataclass
class DSOState:
    optimizer: torch.optim.Optimizer | None = None
    feedback: ErrorFeedback | None = None  # a worker's uploads, an aggregator's gossip
    sensitivity: dict[str, torch.Tensor] = field(default_factory=dict)
    ledger: PrivacyLedger | None = None
    pending: Any = None  # a worker's committed payload and nonce until it reveals them
    # asynchronous: the gradient a worker is computing and the step it was taken at
    in_flight: dict[str, torch.Tensor] | None = None
    started: int = 0
    commits: dict[int, bytes] = field(default_factory=dict)  # aggregator: worker → digest
    gathered: dict[int, Any] = field(default_factory=dict)  # aggregator: G, aggregator → ĝ
    # aggregator, during a gossip round: G as the round began (what it pushes and answers
    # with) and the peers it pushed to (they hold that set already: no answer to them)
    snapshot: dict[int, Any] = field(default_factory=dict)
    peers: list[int] = field(default_factory=list)


class DSO(Strategy[DSOState]):
    name = "dso"
    Config = DSOConfig
    State = DSOState

    def __init__(self, cfg: DSOConfig, graph: GraphFacts) -> None:
        super().__init__(cfg, graph)
        if graph.tiers is None:
            raise ConfigError("topology.name",
                              f"dso runs on a two_tier graph; got '{graph.name}'")
        self.tier = graph.tiers
        self.aggregators = [v for v in range(self.n) if graph.tiers[v] == v]
        self.compressor = {"topk_int8": TopKInt8(cfg.keep), "topk": TopK(cfg.keep),
                           "none": Identity()}[cfg.compression]

    def data_holders(self) -> list[int]:
        return [v for v in range(self.n) if v not in self.aggregators]

    def is_aggregator(self, cid: int) -> bool:
        return self.tier[cid] == cid

    def phases(self, round_: int) -> tuple[str, ...]:
        # gossip round k is two phases: its pushes (in `aggregate` for k = 1, in `gossip`
        # after) and their answers; `apply` merges the answers of round R
        return ("compute", "reveal", "aggregate", "answer",
                *("gossip", "answer") * (self.cfg.gossip_rounds - 1), "apply", "sync")

    def churn_problem(self, client: int, kind: str) -> str | None:
        if self.is_aggregator(client):
            return f"client {client} is an aggregator: its workers would have no tier"
        return None

    def init_state(self, client: Client[DSOState], shared: Any) -> DSOState:
        cfg = self.cfg
        state = DSOState(optimizer=make_optimizer(client.model, cfg),
                         feedback=ErrorFeedback(self.compressor))
        if not self.is_aggregator(client.cid) and cfg.dp.enabled and client.data is not None:
            state.ledger = PrivacyLedger(self.noise_std() / cfg.dp.clip,
                                         cfg.batch_size / len(client.data))
        return state

    def noise_std(self) -> float:
        dp = self.cfg.dp
        return noise_std(dp.clip, dp.epsilon, dp.delta,
                         dp.population or len(self.data_holders()))

    # ------------------------------------------------------------------ workers
    def compute(self, client: Client[DSOState], inbox: list[Message],
                ctx: PhaseContext) -> list[Message]:
        if self.is_aggregator(client.cid):
            return []
        cfg, state = self.cfg, client.state
        semantic = cfg.semantic and cfg.compression != "none"
        if ctx.round % cfg.sensitivity_every == 0 and semantic:
            state.sensitivity = self.probe_sensitivity(client, ctx)
        if state.in_flight is None:
            state.in_flight, state.started = self.gradient(client, ctx), ctx.round
        period = self.period(client)
        client.count_steps(1 / period)  # a gradient of p ticks: 1/p of it in each
        if ctx.round < state.started + period - 1:
            return []  # still computing
        g, state.in_flight = state.in_flight, None
        aggregator = self.tier[client.cid]
        if ctx.tamper is not None:
            # a Byzantine worker runs its own code: no honest clipping or noise, and its
            # attack is what it commits to (scaled by −4 means 4 × its gradient's norm)
            g = ctx.tamper(g, aggregator)
        elif cfg.dp.enabled:
            clip_(g, cfg.dp.clip)
            add_noise_(g, self.noise_std(), client.generator)
            state.ledger.spend()
            client.stats["dp_epsilon"] = Max(state.ledger.epsilon(cfg.dp.delta))
        payload = state.feedback.compress(g, state.sensitivity if semantic else None)
        nonce = draw_nonce(client.generator)
        state.pending = (payload, nonce)
        digest = torch.frombuffer(bytearray(commitment(payload, nonce)), dtype=torch.uint8)
        return [Message(client.cid, aggregator, "commit", digest, tampered=True)]

    def period(self, client: Client[DSOState]) -> int:
        """Ticks a worker needs per gradient: ⌈1/s⌉ when asynchronous, else 1."""
        if not self.cfg.asynchronous:
            return 1
        return max(1, int(np.ceil(1.0 / client.speed - 1e-9)))

    def gradient(self, client: Client[DSOState], ctx: PhaseContext) -> dict[str, torch.Tensor]:
        """∇ loss of the worker's current model on a batch of its shard."""
        client.model.train()
        live = params.trainable_params(client.model)
        loss = ctx.task.loss(client.model, client.data.sample(self.cfg.batch_size,
                                                               client.generator))
        grads = torch.autograd.grad(loss, list(live.values()))
        client.stats["loss"] = float(loss.detach())
        return {name: t.detach().clone() for name, t in zip(live, grads, strict=True)}

    def probe_sensitivity(self, client: Client[DSOState],
                          ctx: PhaseContext) -> dict[str, torch.Tensor]:
        """Activation sensitivity on fixed probe batches, the same at every recomputation.
        ``public``: from the task's held-out split with one generator for every worker, so
        that s — and the entries it selects — depends on no worker's data; ``private``:
        from the worker's shard, with a generator seeded by its id."""
        if self.cfg.probe == "public":
            data = ctx.task.public_data()
            if data is None:
                raise ConfigError("strategy.probe", f"task '{ctx.task.name}' has no public "
                                  "held-out split to probe: use probe=private without DP, "
                                  "or semantic=false")
            generator = torch.Generator().manual_seed(PROBE_SEED)
        else:
            data, generator = client.data, torch.Generator().manual_seed(client.cid)
        device = next(client.model.parameters()).device
        batches = [tuple(t.to(device) for t in data.sample(self.cfg.batch_size, generator))
                   for _ in range(self.cfg.probe_batches)]
        return activation_sensitivity(client.model, batches, ctx.task.loss)

    def reveal(self, client: Client[DSOState], inbox: list[Message],
               ctx: PhaseContext) -> list[Message]:
        state = client.state
        if self.is_aggregator(client.cid):
            state.commits = {m.src: bytes(m.payload.numpy()) for m in self.fresh(inbox, ctx)
                             if m.tag == "commit"}
            return []
        if state.pending is None:
            return []  # asynchronous: no gradient finished this tick
        payload, nonce = state.pending
        state.pending = None
        reveal = {"update": payload,
                  "nonce": torch.frombuffer(bytearray(nonce), dtype=torch.uint8)}
        if self.cfg.asynchronous:
            reveal["step"] = torch.tensor([state.started], dtype=torch.int64)
        # an attacked gradient went into the commitment already (ctx.tamper); a forger's
        # payload is changed on the way out
        return [Message(client.cid, self.tier[client.cid], "reveal", reveal,
                        tampered=ctx.tamper is not None)]

    def sync(self, client: Client[DSOState], inbox: list[Message], ctx: PhaseContext) -> None:
        if self.is_aggregator(client.cid):
            return
        sets = [m.payload for m in self.fresh(inbox, ctx) if m.tag == "set"]
        if sets and sets[-1]:  # lost under a fault, or empty: the worker skips this step
            self.step(client, sets[-1])

    # ------------------------------------------------------------------ aggregators
    def aggregate(self, client: Client[DSOState], inbox: list[Message],
                  ctx: PhaseContext) -> list[Message]:
        if not self.is_aggregator(client.cid):
            return []
        state, cfg = client.state, self.cfg
        live = params.trainable_params(client.model)
        accepted, rejected, ages = [], 0, []
        for msg in self.fresh(inbox, ctx):
            if msg.tag != "reveal":
                continue
            update, nonce = msg.payload["update"], bytes(msg.payload["nonce"].numpy())
            digest = state.commits.get(msg.src)
            if cfg.verify_commitments and (digest is None
                                           or not verifies(update, nonce, digest)):
                rejected += 1
                continue
            accepted.append(self.decompress(update, live))
            if "step" in msg.payload:
                ages.append(ctx.round - int(msg.payload["step"][0]))
        client.stats["rejected_payloads"] = float(rejected)
        if cfg.asynchronous:
            client.stats["staleness"] = Mean(float(sum(ages)), len(ages))
        state.commits = {}
        state.gathered = {}
        if accepted:
            local = {name: aggregate(cfg.aggregator, [g[name] for g in accepted], cfg.trim)
                     for name in live}
            state.gathered[client.cid] = state.feedback.compress(local)
            if cfg.top_aggregator == "weighted_mean":  # its weight: the payloads it used
                state.gathered[client.cid][SERVED] = torch.tensor([len(accepted)],
                                                                  dtype=torch.int32)
        return self.push(client, ctx)

    def answer(self, client: Client[DSOState], inbox: list[Message],
               ctx: PhaseContext) -> list[Message]:
        """The pull half of a gossip round: merge the pushes that came, and answer every
        aggregator that pushed here with the set held when the round began."""
        if not self.is_aggregator(client.cid):
            return []
        pushers = self.merge(client, inbox, ctx)
        state = client.state
        return [Message(client.cid, p, "reply", state.snapshot)
                for p in sorted(set(pushers)) if p not in state.peers]

    def gossip(self, client: Client[DSOState], inbox: list[Message],
               ctx: PhaseContext) -> list[Message]:
        """Gossip round k − 1 ends with its answers merged; round k's pushes go out."""
        if not self.is_aggregator(client.cid):
            return []
        self.merge(client, inbox, ctx)
        self.record_coverage(client, ctx)
        return self.push(client, ctx)

    def apply(self, client: Client[DSOState], inbox: list[Message],
              ctx: PhaseContext) -> list[Message]:
        if not self.is_aggregator(client.cid):
            return []
        self.merge(client, inbox, ctx)
        self.record_coverage(client, ctx)
        gathered = dict(sorted(client.state.gathered.items()))
        client.stats["coverage"] = len(gathered) / len(self.aggregators)
        if gathered:
            self.step(client, gathered)
        return [Message(client.cid, w, "set", gathered)
                for w in ctx.graph.neighbors[client.cid]
                if not self.is_aggregator(w) and (ctx.alive is None or w in ctx.alive)]

    def merge(self, client: Client[DSOState], inbox: list[Message],
              ctx: PhaseContext) -> list[int]:
        """G ← G ∪ every set that arrived; the aggregators that pushed (to answer)."""
        pushers = []
        for msg in self.fresh(inbox, ctx):
            if msg.tag in ("push", "reply"):
                for a, payload in msg.payload.items():
                    client.state.gathered.setdefault(a, payload)
                if msg.tag == "push":
                    pushers.append(msg.src)
        return pushers

    def record_coverage(self, client: Client[DSOState], ctx: PhaseContext) -> None:
        """``coverage_k``: the share of aggregators whose ĝ this one holds once gossip
        round k's answers are in (round k's pushes go out in phase 2k, answers in 2k + 1)."""
        k = (ctx.step - 2) // 2
        client.stats[f"coverage_{k}"] = len(client.state.gathered) / len(self.aggregators)

    def push(self, client: Client[DSOState], ctx: PhaseContext) -> list[Message]:
        """A gossip round begins: G to ``fanout`` random other aggregators."""
        state = client.state
        others = [a for a in self.aggregators if a != client.cid
                  and (ctx.alive is None or a in ctx.alive)]
        order = torch.randperm(len(others), generator=client.generator).tolist()
        state.peers = sorted(others[i] for i in order[: self.cfg.fanout])
        state.snapshot = dict(state.gathered)
        return [Message(client.cid, p, "push", state.snapshot) for p in state.peers]

    # ------------------------------------------------------------------ both
    def step(self, client: Client[DSOState], gathered: dict[int, Any]) -> None:
        """One optimiser step with g_agg, the ``top_aggregator`` rule over the set G."""
        live = params.trainable_params(client.model)
        order = sorted(gathered)
        members = [self.decompress(gathered[a], live) for a in order]
        rule = self.cfg.top_aggregator
        for name, p in live.items():
            vectors = [g[name] for g in members]
            if rule == "weighted_mean":
                p.grad = weighted_mean(vectors, [int(gathered[a][SERVED][0]) for a in order])
            else:
                p.grad = aggregate(rule, vectors, self.cfg.trim)
        client.state.optimizer.step()
        client.state.optimizer.zero_grad(set_to_none=True)

    def decompress(self, payload: dict[str, Any],
                   live: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {name: self.compressor.decompress(payload[name], p)
                for name, p in live.items()}

    @staticmethod
    def fresh(inbox: list[Message], ctx: PhaseContext) -> list[Message]:
        """This round's delivered messages (a late one from an earlier round is stale)."""
        return [m for m in inbox if m.sent_round == ctx.round and not m.undeliverable]


def expected_coverage_rounds(aggregators: int, fanout: int) -> int:
    """⌈log_f A⌉: the gossip rounds after which every aggregator holds every ĝ w.h.p."""
    return max(1, int(np.ceil(np.log(aggregators) / np.log(max(fanout, 2)) - 1e-12)))


def push_pull_coverage(aggregators: int, fanout: int, rounds: int) -> list[float]:
    """E[coverage_k], k = 1..rounds: the expected share of aggregators holding a given ĝ
    after k push-pull rounds, each aggregator pushing to f = min(fanout, A − 1) uniformly
    drawn others and pulling their sets, all between the sets held at the round's start.

    Exact, by a Markov chain over n, the aggregators holding ĝ. From n, an uninformed
    aggregator u is reached by a push from each of the n independently with probability
    f/(A − 1), and pulls from an informed one unless its f peers all miss them, with
    probability 1 − C(A − 1 − n, f)/C(A − 1, f). The pushes of the n informed are
    dependent across u (each sends exactly f), so their union over the A − n uninformed
    is built up one sender at a time; the pulls of the rest are independent. By symmetry
    the mean over aggregators of |G|/A is E[n]/A."""
    from math import comb

    A, f = aggregators, min(fanout, aggregators - 1)
    if A == 1:
        return [1.0] * rounds

    def hypergeom(total: int, good: int, draws: int) -> np.ndarray:
        """P(k good among ``draws`` of ``total`` without replacement), k = 0..draws."""
        return np.array([comb(good, k) * comb(total - good, draws - k) / comb(total, draws)
                         for k in range(draws + 1)])

    def step(n: int) -> np.ndarray:
        """The distribution of the informed count after one round from n."""
        u = A - n
        covered = np.zeros(u + 1)  # uninformed reached by pushes so far
        covered[0] = 1.0
        hits = hypergeom(A - 1, u, f)  # a sender's peers among the uninformed
        for _ in range(n):
            nxt = np.zeros(u + 1)
            for m in range(u + 1):
                if covered[m] == 0:
                    continue
                for h, ph in enumerate(hits):
                    if ph == 0:
                        continue
                    fresh = hypergeom(u, u - m, h)  # of its h, those not reached before
                    for new, pn in enumerate(fresh):
                        if pn:
                            nxt[m + new] += covered[m] * ph * pn
            covered = nxt
        pull = 1 - comb(max(A - 1 - n, 0), f) / comb(A - 1, f)
        out = np.zeros(A + 1)
        for m in range(u + 1):
            rest = u - m
            for j in range(rest + 1):
                out[n + m + j] += covered[m] * comb(rest, j) * pull**j * (1 - pull)**(rest - j)
        return out

    dist = np.zeros(A + 1)
    dist[1] = 1.0
    result = []
    for _ in range(rounds):
        nxt = np.zeros(A + 1)
        for n in range(1, A + 1):
            if dist[n]:
                nxt += dist[n] * step(n)
        dist = nxt
        result.append(float(dist @ np.arange(A + 1)) / A)
    return result
