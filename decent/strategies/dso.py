"""DSO — decentralized semantic optimisation on two tiers (Zen LM technical report).

The graph is ``two_tier``: aggregators 0..A−1 on a complete overlay, each worker linked to
the aggregator nearest by latency. A round is one optimisation step:

  compute    worker: g = ∇ loss on a batch of its shard;
             DP: clip g to norm C, add N(0, σ²I), σ = C·sqrt(2 ln(1.25/δ)) / (ε·N);
             semantic compression with error feedback: g' = g + e, keep the top `keep` of
             |g'| ⊙ s per tensor (s: activation sensitivity on a probe set, recomputed every
             `sensitivity_every` steps), INT8 on the kept values, e ← g' − D(payload);
             commitment c = SHA3-256(payload ‖ nonce) → its aggregator          (32 B)
  reveal     worker: payload and nonce → its aggregator
  aggregate  aggregator: drop every payload whose commitment does not verify; robust
             aggregate of the rest (`aggregator`: trimmed mean β, median, mean, Krum);
             compress it the same way (Top-k + INT8, error feedback) into G = {ĝ_a};
             push G to `fanout` random other aggregators
  gossip     (R − 1 times) aggregator: merge what arrived; answer the aggregators that
             pushed to it with G and push G to `fanout` new random peers (the push-pull
             exchange of epidemic broadcast, Demers et al. 1987)
  apply      aggregator: merge; g_agg = the `top_aggregator` rule over G (the mean by
             default: aggregators are trusted unless listed Byzantine); one optimiser
             step; send G to its workers
  sync       worker: the same g_agg from the same G; the same step

so every client holds the same model whenever the gossip covered every aggregator. A
Byzantine worker's attack is in the gradient it commits to (it verifies; only robust
aggregation can stop it), except ``forge``, which changes the payload after committing.

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
from decent.robust.aggregators import AGGREGATORS, aggregate
from decent.robust.commitment import commitment, draw_nonce, verifies
from decent.strategies.base import Client, PhaseContext, Strategy
from decent.strategies.local_training import OPTIMIZERS, make_optimizer


@dataclass
class DSOConfig:
    name: str = "dso"
    batch_size: int = at_least(1, 8)
    optimizer: str = one_of(OPTIMIZERS, "sgd")  # the step every client takes with g_agg
    lr: float = positive(0.05)
    momentum: float = in_range(0.0, 0, 1, hi_open=True)  # SGD's
    weight_decay: float = at_least(0, 0.0)
    aggregator: str = one_of(AGGREGATORS, "trimmed_mean")  # over an aggregator's workers
    # over G, one aggregate per aggregator: the aggregators are not Byzantine unless
    # faults.byzantine lists one, so a plain mean by default (robust rules there would
    # discard honest aggregators' signal, e.g. the extremes of non-IID tiers)
    top_aggregator: str = one_of(AGGREGATORS, "mean")
    trim: float = in_range(0.1, 0, 0.5, hi_open=True)  # β per side (and Krum's f / m)
    verify_commitments: bool = True
    # what travels: Top-k + INT8 (DSO's), Top-k with fp32 values, or dense fp32 (`keep`,
    # `semantic` unused); every one with error feedback
    compression: str = one_of(("topk_int8", "topk", "none"), "topk_int8")
    keep: float = in_range(0.01, 0, 1, lo_open=True)  # Top-k fraction per tensor
    semantic: bool = True  # rank by |g'| ⊙ s (false: by |g'|)
    sensitivity_every: int = at_least(1, 1000)
    probe_batches: int = at_least(1, 4)
    fanout: int = at_least(1, 4)
    gossip_rounds: int = at_least(1, 3)
    asynchronous: bool = False  # workers of different speeds, nobody waits (see above)
    dp: DPConfig = field(default_factory=DPConfig)


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
    pushers: list[int] = field(default_factory=list)  # who pushed to it last phase


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
        return ("compute", "reveal", "aggregate",
                *("gossip",) * (self.cfg.gossip_rounds - 1), "apply", "sync")

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
        if ctx.tamper is not None:  # a Byzantine worker commits to its attacked gradient
            g = ctx.tamper(g, aggregator)
        if cfg.dp.enabled:
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
        """Activation sensitivity on the worker's fixed probe batches (the same batches at
        every recomputation: drawn from a generator seeded by the worker id)."""
        probe = torch.Generator().manual_seed(client.cid)
        batches = [client.data.sample(self.cfg.batch_size, probe)
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
        return self.push(client, ctx, replies=[])

    def gossip(self, client: Client[DSOState], inbox: list[Message],
               ctx: PhaseContext) -> list[Message]:
        if not self.is_aggregator(client.cid):
            return []
        pushers = self.merge(client, inbox, ctx)
        return self.push(client, ctx, replies=pushers)

    def apply(self, client: Client[DSOState], inbox: list[Message],
              ctx: PhaseContext) -> list[Message]:
        if not self.is_aggregator(client.cid):
            return []
        self.merge(client, inbox, ctx)
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
        k = ctx.step - 2  # gossip round k ends in phase 2 + k
        client.stats[f"coverage_{k}"] = len(client.state.gathered) / len(self.aggregators)
        return pushers

    def push(self, client: Client[DSOState], ctx: PhaseContext,
             replies: list[int]) -> list[Message]:
        """G to ``fanout`` random other aggregators, and back to this phase's pushers."""
        others = [a for a in self.aggregators if a != client.cid
                  and (ctx.alive is None or a in ctx.alive)]
        order = torch.randperm(len(others), generator=client.generator).tolist()
        peers = sorted(others[i] for i in order[: self.cfg.fanout])
        gathered = dict(client.state.gathered)
        out = [Message(client.cid, p, "push", gathered) for p in peers]
        out += [Message(client.cid, p, "reply", gathered) for p in sorted(set(replies))
                if p not in peers]
        return out

    # ------------------------------------------------------------------ both
    def step(self, client: Client[DSOState], gathered: dict[int, Any]) -> None:
        """One optimiser step with g_agg, the ``top_aggregator`` rule over the set G."""
        live = params.trainable_params(client.model)
        members = [self.decompress(gathered[a], live) for a in sorted(gathered)]
        for name, p in live.items():
            p.grad = aggregate(self.cfg.top_aggregator, [g[name] for g in members],
                               self.cfg.trim)
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
