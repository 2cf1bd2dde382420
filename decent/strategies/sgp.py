"""SGP and OSGP — Stochastic Gradient Push (Assran, Loizou, Ballas, Rabbat, ICML 2019).

Push-sum gossip on a directed graph, with local SGD steps between gossips. Client i keeps
a numerator x_i and a push-sum weight w_i (w_i = 1 at the start) and trains the
de-biased z_i = x_i / w_i. With column-stochastic mixing P (p_ji: the share of i's mass
that goes to j, uniform over i's out-neighbours and itself), every round:

SGP (Algorithm 1, with H local steps):
  1. H local steps: g = ∇F_i(z_i) on a batch,  x_i ← x_i − γ·g  (the optimiser's step, on
     the numerator);
  2. send (p_ji x_i, p_ji w_i) to each out-neighbour j   (4·d + 4 bytes per directed edge);
  3. x_i ← p_ii x_i + Σ_j received x_j,   w_i ← p_ii w_i + Σ_j received w_j,
     z_i ← x_i / w_i  (``robust``: z_i ← a robust rule over z_i and the z_j = x_j / w_j).

OSGP (overlap τ ≥ 1, Algorithm 2): nobody waits for the pushes of this round. Every round:
  1. add the mass that has arrived (sent τ rounds ago): x_i += Σ x_j, w_i += Σ w_j;
  2. send (p_ji x_i, p_ji w_i) to each out-neighbour j, keep x_i ← p_ii x_i,
     w_i ← p_ii w_i; the transfers overlap the next τ rounds' computation on the clock
     (a round waits only for a push that has not arrived by the time it reads it);
  3. H local steps on the numerator, as in SGP.

The model holds z_i. A step of γ on x_i is a step of γ / w_i on z_i, and weight decay λ on
x_i is λ·w_i on z_i (SGD's L2 term and AdamW's decoupled decay alike), so the local steps
run on z with those rates (the platform's optimisers, batched clients included); where
the graph's mixing is doubly stochastic (every regular directed graph here), w_i stays 1.
The authors' code applies the optimiser to the numerator in the same way
(facebookresearch/stochastic_gradient_push, ``gossip/distributed.py``: the forward
pre-hook de-biases the parameters, the backward hook turns them back into numerators
before ``optimizer.step()``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from decent.core.messages import Message
from decent.core.schema import at_least
from decent.robust.aggregators import robust_field
from decent.strategies.base import Client, PhaseContext, Strategy
from decent.strategies.gossip import is_robust
from decent.strategies.inbox import Inbox
from decent.strategies.local_training import LocalTrainingConfig, local_steps, make_optimizer
from decent.strategies.phases import phase
from decent.strategies.push import (
    absorb,
    absorb_robustly,
    as_float32,
    push_to_out_neighbours,
    sum_received,
)


@dataclass
class SGPConfig(LocalTrainingConfig):
    name: str = "sgp"
    local_steps: int = at_least(1, 1)  # H: local steps between two gossips (the paper's 1)
    # how a client combines the mass it received: push-sum's sum (mean), or a robust rule
    # over the de-biased values z_j = x_j / w_j (a push of weight ≤ 0 is left out)
    robust: Any = robust_field()


@dataclass
class OSGPConfig(SGPConfig):
    name: str = "osgp"
    overlap: int = at_least(1, 1)  # τ: rounds a push is in flight before it is added


@dataclass
class SGPState:
    optimizer: torch.optim.Optimizer
    weight: float = 1.0  # w_i, the push-sum weight (z_i = x_i / w_i is the model)
    kept: float = 1.0  # SGP: p_ii, the share of its mass client i kept when it pushed


class PushSum(Strategy[SGPState]):
    """What SGP and OSGP share: the state, the graph they need, the local steps."""

    State = SGPState
    batchable = True
    directed_graphs = True
    needs_strong_connectivity = True

    def init_state(self, client: Client[SGPState], shared: Any) -> SGPState:
        return SGPState(make_optimizer(client.model, self.cfg))

    def churn_problem(self, client: int, kind: str) -> str | None:
        return ("push-sum keeps the total mass of the clients fixed; a client that leaves "
                "takes its share of it, and the others' ratios no longer average")

    def train(self, client: Client[SGPState], ctx: PhaseContext) -> None:
        """H steps on the numerator x_i, taken on z_i = x_i / w_i at γ / w_i with weight
        decay λ·w_i (the same update; see the module docstring)."""
        cfg, state = self.cfg, client.state
        w = state.weight
        for group in state.optimizer.param_groups:
            group["lr"], group["weight_decay"] = cfg.lr / w, cfg.weight_decay * w
        scaled = cfg if w == 1.0 else dataclasses.replace(cfg, lr=cfg.lr / w)
        client.stats["loss"] = local_steps(client, state.optimizer, ctx.task, cfg.local_steps,
                                           cfg.batch_size, scaled, ctx.round,
                                           runner=ctx.runner)
        client.stats["push_weight"] = w

    def receive(self, client: Client[SGPState], inbox: Inbox, ctx: PhaseContext,
                own: float) -> None:
        """Add the pushes in ``inbox`` to client i's mass, of which it kept ``own``."""
        state = client.state
        if is_robust(self.cfg.robust):
            state.weight = absorb_robustly(client, ctx, own, state.weight, inbox,
                                           self.cfg.robust)
            return
        numerators, received = sum_received(inbox)
        state.weight = absorb(client, ctx, own, state.weight, numerators, received)


class SGP(PushSum):
    name = "sgp"
    Config = SGPConfig

    @phase()
    def local(self, client: Client[SGPState], inbox: Inbox,
              ctx: PhaseContext) -> list[Message]:
        self.train(client, ctx)
        messages, client.state.kept = push_to_out_neighbours(client, ctx, client.state.weight)
        return messages

    @phase()
    def gossip(self, client: Client[SGPState], inbox: Inbox, ctx: PhaseContext) -> None:
        self.receive(client, inbox, ctx, client.state.kept)


class OSGP(PushSum):
    name = "osgp"
    Config = OSGPConfig

    @phase()
    def step(self, client: Client[SGPState], inbox: Inbox,
             ctx: PhaseContext) -> list[Message]:
        state = client.state
        self.receive(client, inbox, ctx, 1.0)  # what was pushed τ rounds ago
        messages, kept = push_to_out_neighbours(client, ctx, state.weight,
                                                overlap=self.cfg.overlap)
        # x_i ← p_ii x_i and w_i ← p_ii w_i: z_i is unchanged, only the weight shrinks
        state.weight = as_float32(kept * state.weight)
        self.train(client, ctx)
        return messages
