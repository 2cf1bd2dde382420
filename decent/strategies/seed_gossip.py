"""Gossip with shared randomness — the strawman of the SeedFlood paper, §3.2.

Every model is written as θ_i = θ_0 − Σ_s c_i[s]·z(s): a coefficient per seed ever drawn
by anyone. Iteration t, client i:
  1. estimates α at θ_i with a fresh seed s (MeZO) and adds c_i[s] = η α;
  2. sends its whole coefficient list to its neighbours     (12 bytes per entry: it grows
     by n entries every iteration);
  3. mixes c_i ← Σ_j w_ij c_j (Metropolis weights) and rebuilds θ_i from θ_0 by
     regenerating z for every seed it holds — O(t·n·d) work per client per iteration.
Gossip never reaches exact consensus, and both the messages and the rebuild grow with t:
the blow-up SeedFlood's flooding of (seed, α) pairs avoids.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from decent.core.messages import Message
from decent.models import params
from decent.strategies.base import Client, PhaseContext, Strategy
from decent.strategies.inbox import Inbox
from decent.strategies.phases import phase
from decent.strategies.zo_training import ZOStepConfig, zo_steps
from decent.zo import mezo


@dataclass
class SeedGossipConfig(ZOStepConfig):
    name: str = "seed_gossip"


@dataclass
class SeedGossipState:
    theta0: dict[str, torch.Tensor]  # the initial model every rebuild starts from
    coef: dict[int, float] = field(default_factory=dict)  # seed → coefficient (float64)


class SeedGossip(Strategy[SeedGossipState]):
    name = "seed_gossip"
    Config = SeedGossipConfig
    State = SeedGossipState
    # its MeZO steps' ±ε evaluations run chunk by chunk (decent.engine.stacked_zo)
    batchable = True
    zo_estimator = "mezo"

    def init_state(self, client: Client[SeedGossipState], shared: Any) -> SeedGossipState:
        return SeedGossipState(theta0=params.snapshot(client.model))

    @phase()
    @torch.no_grad()
    def local(self, client: Client[SeedGossipState], inbox: Inbox,
              ctx: PhaseContext) -> list[Message]:
        state = client.state
        client.stats["loss"], updates = zo_steps(client, ctx, self.cfg)
        for seed, coef in updates:
            state.coef[seed] = state.coef.get(seed, 0.0) + coef
        client.stats["coefficients"] = float(len(state.coef))
        seeds = sorted(state.coef)
        payload = (torch.tensor(seeds, dtype=torch.int64),
                   torch.tensor([state.coef[s] for s in seeds], dtype=torch.float32))
        return self.to_neighbours(client, ctx, "coefficients", payload)

    @phase()
    @torch.no_grad()
    def gossip(self, client: Client[SeedGossipState], inbox: Inbox,
               ctx: PhaseContext) -> None:
        w = ctx.graph.weights[client.cid]
        newest = inbox.newest()
        # a lost neighbour's weight stays with the client's own coefficients
        own = w[client.cid] + sum(w[j] for j in ctx.graph.neighbors[client.cid]
                                  if j not in newest)
        mixed: dict[int, float] = {s: own * c for s, c in client.state.coef.items()}
        for msg in newest.values():
            seeds, coefs = msg.payload
            for s, c in zip(seeds.tolist(), coefs.tolist(), strict=True):
                mixed[s] = mixed.get(s, 0.0) + w[msg.src] * c
        client.state.coef = mixed
        # rebuild θ_i = θ_0 − Σ_s c[s] z(s): one d-entry Gaussian per seed held
        params.load(client.model, client.state.theta0)
        tensors = list(params.trainable_params(client.model).values())
        mezo.apply_updates(tensors, [(s, float(np.float32(c))) for s, c in sorted(mixed.items())])
