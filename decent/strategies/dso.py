"""DSO — decentralized semantic optimisation on two tiers (Zen LM technical report).

The graph is ``two_tier``: aggregators 0..A−1 on a complete overlay, each worker linked to
the aggregator nearest by latency. A round is one optimisation step:

  compute    worker: g = ∇ loss on a batch of its shard;
             DP (honest workers), DP-SGD instead: a Poisson sample of the shard at rate
             q = B/|D|, g = Σ_i clip(∇ loss_i, C) / B + N(0, σ²I),
             σ = C·sqrt(2 ln(1.25/δ)) / (ε·N);
             semantic compression with error feedback: g' = g + e, keep the top `keep` of
             |g'| ⊙ s over the whole gradient g ∈ R^d (``compression.scope: global``;
             per_tensor: of each tensor; s: activation sensitivity on the probe set — the
             task's public held-out split, the same batches for every worker — recomputed
             every `sensitivity_every` steps), INT8 on the kept values (one scale),
             e ← g' − D(payload);
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

Privacy (``dp``): honest workers run DP-SGD; what their ``dp_epsilon`` bounds and what
it leaves out is :mod:`decent.strategies.dso_privacy`'s docstring.

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
from typing import Any, ClassVar

import numpy as np
import torch

from decent.compression import COMPRESSORS, ErrorFeedback, build_compressor
from decent.compression.topk import SparseConfig, TopKInt8Config
from decent.compression.tree import decompress_tree
from decent.core.errors import ConfigError
from decent.core.graph import GraphFacts
from decent.core.messages import Message
from decent.core.registry import component
from decent.core.schema import at_least, in_range, one_of, positive
from decent.core.stats import Mean
from decent.models import params
from decent.privacy.gaussian import DPConfig, PrivacyLedger
from decent.robust.aggregators import AGGREGATORS, aggregate, build_aggregator, weighted_mean
from decent.robust.commitment import commitment, draw_nonce, verifies
from decent.strategies import dso_privacy as privacy
from decent.strategies.base import Client, PhaseContext, Strategy
from decent.strategies.config import StrategyConfig
from decent.strategies.dso_helpers import (
    expected_coverage_rounds,
    probe_sensitivity,
    push_pull_coverage,
)
from decent.strategies.inbox import Inbox
from decent.strategies.local_training import (
    OPTIMIZERS,
    adamw_betas,
    check_betas,
    make_optimizer,
)
from decent.strategies.phases import AGGREGATOR, WORKER, phase

__all__ = ["DSO", "DSOConfig", "expected_coverage_rounds", "push_pull_coverage"]

PROBES = ("public", "private")
SERVED = "served"  # with weighted_mean: the key of ĝ_a's count in G (no parameter's name)


@dataclass
class DSOConfig(StrategyConfig):
    RENAMED: ClassVar[dict[str, str]] = {"keep": "compression.keep", "trim": "aggregator.trim"}

    def examples_per_step(self) -> int:
        return self.batch_size

    name: str = "dso"
    batch_size: int = at_least(1, 8)  # examples per gradient
    optimizer: str = one_of(OPTIMIZERS, "sgd")  # the step every client takes with g_agg
    lr: float = positive(0.05)  # the learning rate of every client's step with the aggregate
    momentum: float = in_range(0.0, 0, 1, hi_open=True)  # SGD's
    betas: list[float] = adamw_betas()  # AdamW's (β1, β2)
    weight_decay: float = at_least(0, 0.0)  # the step's weight decay
    # over an aggregator's workers: {name: trimmed_mean, trim: β per side}, median, mean, krum
    aggregator: Any = field(default_factory=lambda: AGGREGATORS.config("trimmed_mean"),
                            metadata=component(AGGREGATORS))
    # over G, one aggregate per aggregator: a plain mean by default, the aggregators not being
    # Byzantine unless faults.byzantine lists one (robust rules would discard honest non-IID
    # tiers' signal); `weighted_mean` weighs each ĝ_a by the payloads a aggregated that round
    # (those that verified), so a worker counts the same whatever the size of its tier
    top_aggregator: Any = field(default_factory=lambda: AGGREGATORS.config("mean"),
                                metadata=component(AGGREGATORS))
    verify_commitments: bool = True  # aggregators drop payloads whose SHA3 commitment fails
    # what travels, the section every method uses: Top-k + INT8 (DSO's), topk, int8 or
    # dense (`identity`; `semantic` unused but by Top-k); always with error feedback
    # (Top-K over the whole gradient, g ∈ R^d, as the report's Algorithm 1: scope global)
    compression: Any = field(default_factory=lambda: TopKInt8Config(
        keep=0.01, error_feedback=True, scope="global"), metadata=component(COMPRESSORS))
    semantic: bool = True  # rank by |g'| ⊙ s (false: by |g'|)
    # where s comes from: `public`, the task's held-out split, the same probe batches for
    # every worker (the report's fixed public probe set); `private`, the worker's own shard,
    # which decides the kept indices — they travel un-noised, so DP refuses it
    probe: str = one_of(PROBES, "public")
    sensitivity_every: int = at_least(1, 1000)  # rounds between recomputing s (semantic)
    probe_batches: int = at_least(1, 4)  # batches the sensitivity s is estimated on
    fanout: int = at_least(1, 4)  # peers each aggregator sends its set G to per gossip round
    gossip_rounds: int = at_least(1, 3)  # epidemic gossip rounds between aggregators per step
    asynchronous: bool = False  # workers of different speeds, nobody waits (see above)
    dp: DPConfig = field(default_factory=DPConfig)  # DP: clip and Gaussian noise per update

    @property
    def semantic_topk(self) -> bool:
        """Entries are kept by |g'| ⊙ s: a Top-k compressor with ``semantic`` on."""
        return self.semantic and isinstance(self.compression, SparseConfig)

    def validate(self, prefix: str = "strategy") -> None:
        check_betas(self.betas, prefix)
        if not self.compression.error_feedback:
            raise ConfigError(f"{prefix}.compression.error_feedback", "DSO's workers and "
                              "aggregators always keep the residual of what they send: "
                              "leave it true")
        if self.dp.enabled and self.probe == "private" and self.semantic_topk:
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
    batch_note = "a step applies the aggregated gradient, not local steps"
    roles = (AGGREGATOR, WORKER)

    def __init__(self, cfg: DSOConfig, graph: GraphFacts) -> None:
        super().__init__(cfg, graph)
        if graph.tiers is None:
            raise ConfigError("topology.name",
                              f"dso runs on a two_tier graph; got '{graph.name}'")
        self.tier = graph.tiers
        self.aggregators = [v for v in range(self.n) if graph.tiers[v] == v]
        self.compressor = build_compressor(cfg.compression)
        self.rule = build_aggregator(cfg.aggregator)  # weighted_mean: refused here
        top = cfg.top_aggregator  # weighted_mean (None): step() has the counts it weighs by
        self.top_rule = None if top.name == "weighted_mean" else build_aggregator(top)

    def role(self, cid: int) -> str:
        return AGGREGATOR if self.is_aggregator(cid) else WORKER

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
            state.ledger = privacy.worker_ledger(cfg, client, len(self.data_holders()))
        return state

    def privacy_note(self, byzantine: list[int], attack: str) -> str | None:
        return privacy.privacy_note(self.cfg.dp, self.data_holders(), byzantine, attack)

    # ------------------------------------------------------------------ workers
    @phase(role=WORKER)
    def compute(self, client: Client[DSOState], inbox: Inbox,
                ctx: PhaseContext) -> list[Message]:
        cfg, state = self.cfg, client.state
        semantic = cfg.semantic_topk
        if ctx.round % cfg.sensitivity_every == 0 and semantic:
            state.sensitivity = self.probe_sensitivity(client, ctx)
        if state.in_flight is None:
            # the gradient of the model held now (with DP, an honest worker's is DP-SGD's,
            # clipped); charged below, 1/p in each tick
            state.in_flight = privacy.worker_gradient(client, ctx, cfg)
            state.started = ctx.round
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
        elif cfg.dp.enabled:  # g is clipped already: its noise, and the spending
            privacy.release(client, g, cfg, len(self.data_holders()))
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

    def probe_sensitivity(self, client: Client[DSOState],
                          ctx: PhaseContext) -> dict[str, torch.Tensor]:
        """s on the configured probe (:func:`~decent.strategies.dso_helpers.probe_sensitivity`)."""
        cfg = self.cfg
        return probe_sensitivity(client, ctx, cfg.probe, cfg.batch_size, cfg.probe_batches)

    @phase(role=WORKER)
    def reveal(self, client: Client[DSOState], inbox: Inbox,
               ctx: PhaseContext) -> list[Message]:
        state = client.state
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

    @phase(role=WORKER)
    def sync(self, client: Client[DSOState], inbox: Inbox, ctx: PhaseContext) -> None:
        sets = [m.payload for m in inbox.fresh("set")]
        if sets and sets[-1]:  # lost under a fault, or empty: the worker skips this step
            self.step(client, sets[-1])

    # ------------------------------------------------------------------ aggregators
    @phase("reveal", role=AGGREGATOR)
    def file_commitments(self, client: Client[DSOState], inbox: Inbox,
                         ctx: PhaseContext) -> None:
        """While its workers reveal: keep the digests they committed to."""
        client.state.commits = {m.src: bytes(m.payload.numpy())
                                for m in inbox.fresh("commit")}

    @phase(role=AGGREGATOR)
    def aggregate(self, client: Client[DSOState], inbox: Inbox,
                  ctx: PhaseContext) -> list[Message]:
        state, cfg = client.state, self.cfg
        live = params.trainable_params(client.model)
        accepted, rejected, ages = [], 0, []
        for msg in inbox.fresh("reveal"):
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
            local = {name: aggregate(self.rule, [g[name] for g in accepted])
                     for name in live}
            state.gathered[client.cid] = state.feedback.compress(local)
            if cfg.top_aggregator.name == "weighted_mean":  # its weight: the payloads it used
                state.gathered[client.cid][SERVED] = torch.tensor([len(accepted)],
                                                                  dtype=torch.int32)
        return self.push(client, ctx)

    @phase(role=AGGREGATOR)
    def answer(self, client: Client[DSOState], inbox: Inbox,
               ctx: PhaseContext) -> list[Message]:
        """The pull half of a gossip round: merge the pushes that came, and answer every
        aggregator that pushed here with the set held when the round began."""
        pushers = self.merge(client, inbox, ctx)
        state = client.state
        return [Message(client.cid, p, "reply", state.snapshot)
                for p in sorted(set(pushers)) if p not in state.peers]

    @phase(role=AGGREGATOR)
    def gossip(self, client: Client[DSOState], inbox: Inbox,
               ctx: PhaseContext) -> list[Message]:
        """Gossip round k − 1 ends with its answers merged; round k's pushes go out."""
        self.merge(client, inbox, ctx)
        self.record_coverage(client, ctx)
        return self.push(client, ctx)

    @phase(role=AGGREGATOR)
    def apply(self, client: Client[DSOState], inbox: Inbox,
              ctx: PhaseContext) -> list[Message]:
        self.merge(client, inbox, ctx)
        self.record_coverage(client, ctx)
        gathered = dict(sorted(client.state.gathered.items()))
        client.stats["coverage"] = len(gathered) / len(self.aggregators)
        if gathered:
            self.step(client, gathered)
        return [Message(client.cid, w, "set", gathered)
                for w in ctx.graph.neighbors[client.cid]
                if not self.is_aggregator(w) and (ctx.alive is None or w in ctx.alive)]

    def merge(self, client: Client[DSOState], inbox: Inbox,
              ctx: PhaseContext) -> list[int]:
        """G ← G ∪ every set that arrived; the aggregators that pushed (to answer)."""
        pushers = []
        for msg in inbox.fresh():
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
        for name, p in live.items():
            vectors = [g[name] for g in members]
            p.grad = aggregate(self.top_rule, vectors) if self.top_rule is not None else \
                weighted_mean(vectors, [int(gathered[a][SERVED][0]) for a in order])
        client.state.optimizer.step()
        client.state.optimizer.zero_grad(set_to_none=True)

    def decompress(self, payload: dict[str, Any],
                   live: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return decompress_tree(self.compressor, payload, live)
