"""Combo — segmented gossip (Hu, Jiang, Wang & Li, 2019, "Decentralized federated learning:
a segmented gossip approach").

Round t, worker i (``segments`` = S, ``replicas`` = R, ``local_steps`` = τ):
  1. τ local SGD steps: W_i;
  2. split W_i (flattened) into S segments of ⌊d/S⌋ values, the last one taking the
     remainder; for every segment l pull it from R peers: the S·R requests go to a random
     permutation π of the candidate peers in turn, request k = l·R + r to π[k mod m], so
     they are drawn without replacement until the m candidates run out (S·R ≤ m: every
     request to a different peer), and the R peers of one segment always differ;
     a request is a real message: (round, segment) as two int32, 8 bytes;
  3. every worker answers each request with its segment W_j[l] (4·|l| bytes at fp32, or
     at ``wire_dtype``) and a header (round, segment, |D_j|), three int32, 12 bytes;
  4. segment-wise aggregation weighted by data size:
         W̃_i[l] = Σ_{j∈P_l} |D_j| W_j[l] / Σ_{j∈P_l} |D_j|,   P_l = providers of l + {i}.
With ``robust``, step 4's weighted mean of a segment is a robust rule over the same
copies (its weights the same |D_j| / Σ|D|).
S = 1 is plain gossip with R peers; R = n − 1 on the complete graph is all-reduce (every
worker ends the round on the data-weighted mean: FedAvg with outer SGD lr 1).

Candidates are the round graph's neighbours (any peer on ``complete``, the overlay the
paper assumes) that the worker believes alive, minus this round's newcomers (they hold no
model yet) and minus peers it has marked offline.

Dynamic workers (paper §4.3):
* a request to a worker that has gone comes back undeliverable: the requester marks that
  peer offline and sends the request again, in the next phase, to the next peer of π not
  yet asked for that segment, preferring peers it has heard from this round (``retries``
  extra phases; a segment still short after them is aggregated from the providers that
  did answer);
* a peer marked offline is skipped until it answers again (a message from it clears the
  mark) or the membership no longer lists it (then the mark is moot);
* a newcomer registers (the platform lists it as alive from its first round), pulls every
  segment from R peers and aggregates them *without* a local model (P_l = providers of
  l only), then trains from its next round on.

Choices where the paper leaves one open: aggregation runs in float64 over P_l in id order
and is rounded once to float32 (so every worker of an all-reduce holds the same bits);
peers are drawn from the worker's own RNG; requests and replies stale by a round (a
delayed message under injected faults) are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from decent.core.errors import ConfigError
from decent.core.graph import GraphFacts
from decent.core.messages import Message
from decent.core.schema import at_least, positive
from decent.models import params
from decent.robust.aggregators import robust_field
from decent.robust.neighbourhood import robust_average
from decent.strategies.base import Client, PhaseContext, Strategy
from decent.strategies.gossip import is_robust
from decent.strategies.inbox import Inbox
from decent.strategies.local_training import LocalTrainingConfig, local_steps, make_optimizer
from decent.strategies.phases import phase
from decent.strategies.wire import WIRE_DTYPES, wire_dtype_field

PULL, SEGMENT = "pull", "segment"
CHUNK = 1 << 18  # values per float64 accumulation chunk (2 MiB)


@dataclass
class ComboConfig(LocalTrainingConfig):
    """Defaults are the paper's (§5.1): 40 local SGD steps of batch 128 at lr 0.1 between
    synchronisations, S = 10, R = 2. ``retries`` and ``wire_dtype`` are ours: the paper
    re-sends a request to a gone peer without saying how often, and does not say in what
    precision segments travel."""

    name: str = "combo"
    local_steps: int = at_least(1, 40)  # τ
    batch_size: int = at_least(1, 128)  # examples per local step
    lr: float = positive(0.1)  # the local SGD learning rate
    segments: int = at_least(1, 10)  # S
    replicas: int = at_least(1, 2)  # R
    retries: int = at_least(0, 2)  # phases left for re-sent requests
    wire_dtype: str = wire_dtype_field()  # the dtype segments travel in (bfloat16 halves the bytes)
    # how a worker combines a segment's copies: the data-weighted mean (the paper's), or a
    # robust rule over its own segment and the providers' (weights |D_j| / Σ|D|)
    robust: Any = robust_field()


@dataclass
class ComboState:
    optimizer: torch.optim.Optimizer
    fresh: bool = False  # a newcomer that has not aggregated yet: trains no step, serves none
    offline: set[int] = field(default_factory=set)  # peers whose requests came back
    heard: set[int] = field(default_factory=set)  # peers that sent something this round
    # within a round (empty between rounds)
    order: list[int] = field(default_factory=list)  # π over the candidates
    cursor: int = 0  # requests drawn from π so far
    asked: list[list[int]] = field(default_factory=list)  # per segment, peers asked
    # per segment, provider → (|D_j|, W_j[l]) received
    got: list[dict[int, tuple[int, torch.Tensor]]] = field(default_factory=list)
    flat: torch.Tensor | None = None  # W_i after the local steps, what it serves
    # per segment, the providers the last aggregation used (self not included)
    providers: list[tuple[int, ...]] = field(default_factory=list)


def segment_bounds(d: int, segments: int) -> list[tuple[int, int]]:
    """[lo, hi) of each segment: ⌊d/S⌋ values each, the last one takes the remainder."""
    size = d // segments
    return [(seg * size, d if seg == segments - 1 else (seg + 1) * size)
            for seg in range(segments)]


def request_peers(order: list[int], segments: int, replicas: int) -> list[list[int]]:
    """The peers of each segment's R requests: request k = l·R + r goes to π[k mod m]."""
    m = len(order)
    r_eff = min(replicas, m)
    return [[order[(seg * r_eff + r) % m] for r in range(r_eff)] for seg in range(segments)]


def data_size(client: Client[ComboState]) -> int:
    """|D_i|: the weight of the client's model in a segment average."""
    return len(client.data) if client.data is not None else 0


class Combo(Strategy[ComboState]):
    name = "combo"
    Config = ComboConfig
    State = ComboState
    batchable = True
    pulls_on_join = True

    def __init__(self, cfg: ComboConfig, graph: GraphFacts) -> None:
        super().__init__(cfg, graph)
        if cfg.replicas > graph.n - 1:
            raise ConfigError("strategy.replicas", f"at most n − 1 = {graph.n - 1} peers can "
                              f"provide a segment (got {cfg.replicas})")

    def phases(self, round_: int) -> tuple[str, ...]:
        return ("local", *["serve"] * (1 + self.cfg.retries), "aggregate")

    def init_process(self, model: torch.nn.Module) -> Any:
        d = sum(p.numel() for p in model.parameters() if p.requires_grad)
        if self.cfg.segments > d:
            raise ConfigError("strategy.segments", f"must be ≤ the model's {d} trainable "
                              f"values (got {self.cfg.segments})")
        return None

    def init_state(self, client: Client[ComboState], shared: Any) -> ComboState:
        return ComboState(make_optimizer(client.model, self.cfg))

    def bootstrap(self, client: Client[ComboState], vector: np.ndarray | None,
                  shared: Any) -> None:
        """A newcomer keeps no model of its own: its first round only pulls."""
        client.state = self.init_state(client, shared)
        client.state.fresh = True

    # ------------------------------------------------------------------ the phases
    @phase()
    def local(self, client: Client[ComboState], inbox: Inbox,
              ctx: PhaseContext) -> list[Message]:
        cfg, state = self.cfg, client.state
        self._heard_from(state, inbox)
        state.heard = set()
        if not state.fresh:
            client.stats["loss"] = local_steps(client, state.optimizer, ctx.task,
                                               cfg.local_steps, cfg.batch_size, cfg, ctx.round,
            runner=ctx.runner)
        if ctx.alive is not None:  # the membership knows they are gone: the mark is moot
            state.offline &= set(ctx.alive)
        state.flat = params.flat_tensor(client.model)
        candidates = [j for j in ctx.graph.neighbors[client.cid]
                      if (ctx.alive is None or j in ctx.alive) and j not in ctx.joined
                      and j not in state.offline]
        perm = torch.randperm(len(candidates), generator=client.generator).tolist()
        state.order = [candidates[k] for k in perm]
        state.asked = request_peers(state.order, cfg.segments, cfg.replicas)
        state.cursor = sum(len(a) for a in state.asked)
        state.got = [{} for _ in range(cfg.segments)]
        return [self._request(client.cid, j, seg, ctx.round)
                for seg, peers in enumerate(state.asked) for j in peers]

    @phase()
    def serve(self, client: Client[ComboState], inbox: Inbox,
              ctx: PhaseContext) -> list[Message]:
        state = client.state
        self._heard_from(state, inbox)
        self._collect(state, inbox)
        out = []
        if not state.fresh:  # answer this round's requests (a newcomer is never asked)
            bounds = segment_bounds(state.flat.numel(), self.cfg.segments)
            size = data_size(client)
            wire = WIRE_DTYPES[self.cfg.wire_dtype]
            for msg in inbox.fresh(PULL):
                _, seg = (int(v) for v in msg.payload)
                lo, hi = bounds[seg]
                out.append(Message(client.cid, msg.src, SEGMENT, {
                    "values": state.flat[lo:hi].to(wire, copy=True),
                    "header": np.array([ctx.round, seg, size], dtype=np.int32)}))
        if ctx.step <= self.cfg.retries:  # a later serve phase can still answer
            bounced = inbox.bounced(PULL)
            state.offline.update(m.dst for m in bounced)  # all marked before any re-send
            for msg in bounced:
                seg = int(msg.payload[1])
                peer = self._next_peer(state, seg)
                if peer is not None:
                    state.asked[seg].append(peer)
                    out.append(self._request(client.cid, peer, seg, ctx.round))
        return out

    @phase()
    @torch.no_grad()
    def aggregate(self, client: Client[ComboState], inbox: Inbox,
                  ctx: PhaseContext) -> None:
        state = client.state
        self._heard_from(state, inbox)
        self._collect(state, inbox)
        own = state.flat
        assert own is not None
        own_size = data_size(client)
        state.providers = []
        buffer = torch.empty(min(CHUNK, own.numel()), dtype=torch.float64, device=own.device)
        for seg, (lo, hi) in enumerate(segment_bounds(own.numel(), self.cfg.segments)):
            parts = dict(state.got[seg])
            state.providers.append(tuple(sorted(parts)))
            if not state.fresh:
                parts[client.cid] = (own_size, own[lo:hi])
            if not parts:  # nobody answered a newcomer: it keeps what it holds
                continue
            order = sorted(parts)
            weight = sum(parts[j][0] for j in order)
            if is_robust(self.cfg.robust):
                own[lo:hi] = self._robust_segment(client.cid, parts, order, weight,
                                                  own[lo:hi])
                continue
            # float64 sums in id order; |D_j|·W_j[l] is exact there (a float32 times an
            # integer below 2**29), so the rounding is the reference's. Chunks keep the
            # float64 buffer in cache (7× faster than whole segments at SmolLM2 size), and
            # each chunk of W_i is read before it is overwritten with the result.
            for a in range(0, hi - lo, CHUNK):
                b = min(hi - lo, a + CHUNK)
                total = buffer[: b - a].zero_()
                for j in order:
                    size, values = parts[j]
                    total.add_(values[a:b], alpha=size)
                own[lo + a : lo + b] = total.div_(weight)
        params.load_flat_tensor(client.model, own)
        client.stats["providers"] = float(np.mean([len(p) for p in state.providers]))
        state.fresh = False
        state.flat, state.got, state.asked, state.order = None, [], [], []

    def _robust_segment(self, me: int, parts: dict[int, tuple[int, torch.Tensor]],
                        order: list[int], weight: int, mine: torch.Tensor) -> torch.Tensor:
        """The rule ``robust`` over one segment's copies: the worker's own (when it has
        one: a newcomer's is the first provider's) and the providers', by data size."""
        centre = me if me in parts else order[0]
        others = {j: {"s": parts[j][1]} for j in order if j != centre}
        out = robust_average(self.cfg.robust, {"s": parts[centre][1].clone()},
                             parts[centre][0] / weight,
                             {j: parts[j][0] / weight for j in others}, others)
        return out["s"].to(mine.dtype)

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _request(src: int, dst: int, segment: int, round_: int) -> Message:
        return Message(src, dst, PULL, np.array([round_, segment], dtype=np.int32))

    @staticmethod
    def _heard_from(state: ComboState, inbox: Inbox) -> None:
        """A peer that sends anything is online again (and there this round)."""
        for msg in inbox.delivered():
            state.offline.discard(msg.src)
            state.heard.add(msg.src)

    @staticmethod
    def _collect(state: ComboState, inbox: Inbox) -> None:
        for msg in inbox.fresh(SEGMENT):
            _, seg, size = (int(v) for v in msg.payload["header"])
            state.got[seg][msg.src] = (size, msg.payload["values"])

    @staticmethod
    def _next_peer(state: ComboState, segment: int) -> int | None:
        """The next peer of π, continuing the round's draw, not yet asked for ``segment``
        and not marked offline; first among the peers heard from this round (a request or
        a reply proves they are there: with several silent departures, a re-sent request
        would otherwise risk hitting another one)."""
        m = len(state.order)
        for known_there in (True, False):
            for k in range(state.cursor, state.cursor + m):
                peer = state.order[k % m]
                if (peer not in state.asked[segment] and peer not in state.offline
                        and (peer in state.heard or not known_there)):
                    state.cursor = k + 1
                    return peer
        return None
