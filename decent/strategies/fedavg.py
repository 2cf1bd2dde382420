"""FedAvg with an outer optimiser — the server-based baseline family.

The server is vertex 0 of a star graph, so its links are checked and counted like any
other. Round t:
  1. every worker starts from the global model θ, runs H local steps to θ_i and uploads
     the pseudo-gradient Δ_i = θ − θ_i                                  (4·d bytes up;
     optionally compressed, Top-K or INT8, with error feedback on the worker);
  2. the server averages Δ = mean_i Δ_i (or combines them by the rule ``robust``: median,
     trimmed mean, Krum, ...), sets it as the gradient of θ and takes one
     outer optimiser step, then broadcasts θ                          (4·d bytes down);
  3. workers load θ.
Outer SGD with lr 1 is FedAvg (McMahan et al., 2017); Nesterov SGD with lr 0.7 and
momentum 0.9 is DiLoCo's outer loop (Douillard et al., 2023).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from decent.compression import COMPRESSORS, CompressionConfig, ErrorFeedback, build_compressor
from decent.compression.tree import compress_tree, decompress_tree
from decent.core.errors import ConfigError
from decent.core.graph import GraphFacts
from decent.core.messages import Message
from decent.core.registry import component
from decent.core.schema import in_range, positive
from decent.models import params
from decent.robust.aggregators import AggregatorConfig, Rule, build_aggregator, robust_field
from decent.robust.neighbourhood import flat, too_few, unflat
from decent.strategies.base import Client, PhaseContext, Strategy
from decent.strategies.gossip import is_robust
from decent.strategies.inbox import Inbox
from decent.strategies.local_training import LocalTrainingConfig, local_steps, make_optimizer
from decent.strategies.phases import SERVER as SERVER_ROLE
from decent.strategies.phases import WORKER, phase

SERVER = 0


@dataclass
class OuterStepConfig(LocalTrainingConfig):
    """The server's outer optimiser: SGD on the mean pseudo-gradient (lr 1: FedAvg)."""

    outer_lr: float = positive(1.0)  # the server's outer learning rate (1 with no momentum: FedAvg)
    outer_momentum: float = in_range(0.0, 0, 1, hi_open=True)  # the outer SGD momentum
    outer_nesterov: bool = False  # Nesterov momentum for the outer step

    def validate(self, prefix: str = "strategy") -> None:
        super().validate(prefix)
        if self.outer_nesterov and self.outer_momentum <= 0:
            raise ConfigError(f"{prefix}.outer_nesterov", "Nesterov needs outer_momentum > 0")


def outer_optimizer(parameters: Iterable[torch.Tensor],
                    cfg: OuterStepConfig) -> torch.optim.Optimizer:
    """The server's outer optimiser: SGD over ``parameters`` with ``cfg``'s ``outer_lr``,
    ``outer_momentum`` and ``outer_nesterov``, stepped with the workers' mean
    pseudo-gradient (Δ_i = θ − θ_i) as the gradient."""
    return torch.optim.SGD(parameters, lr=cfg.outer_lr, momentum=cfg.outer_momentum,
                           nesterov=cfg.outer_nesterov)


@dataclass
class FedAvgConfig(OuterStepConfig):
    name: str = "fedavg"
    # Upload compression (the broadcast stays dense): identity by default.
    compression: Any = field(default_factory=CompressionConfig,
                             metadata=component(COMPRESSORS))
    # how the server combines the workers' pseudo-gradients: their mean (the method as
    # published), or a Byzantine-robust rule (median, trimmed_mean, krum, ...)
    robust: Any = robust_field()


@dataclass
class FedAvgState:
    """The server holds the outer optimiser; a worker its inner optimiser and, with error
    feedback, the residual of its compressed uploads."""

    outer: torch.optim.Optimizer | None = None
    optimizer: torch.optim.Optimizer | None = None
    feedback: ErrorFeedback | None = None


class ServerStar:
    """What the methods with a server at vertex 0 of a star share: the graph they accept,
    the roles (vertex 0 the server, every other vertex a worker, which holds data) and who
    may leave (the workers)."""

    name: str
    n: int
    roles: ClassVar[tuple[str, ...]] = (SERVER_ROLE, WORKER)

    def require_star(self, graph: GraphFacts) -> None:
        if not graph.is_star(SERVER):
            raise ConfigError(
                "topology.name",
                f"{self.name} runs on a star (server at vertex 0); got '{graph.name}'",
            )

    def role(self, cid: int) -> str:
        return SERVER_ROLE if cid == SERVER else WORKER

    def churn_problem(self, client: int, kind: str) -> str | None:
        if client == SERVER:
            return "the server (client 0) holds the global model; workers may come and go"
        return None

    def check_robust(self, robust: AggregatorConfig, graph: GraphFacts) -> None:
        """The server combines n − 1 uploads (a gossip neighbourhood rule is refused when
        the rule is built, :meth:`server_rule`)."""
        problem = too_few(robust, graph.n - 1, "the workers' uploads")
        if problem is not None:
            raise ConfigError("strategy.robust", problem)

    @staticmethod
    def server_rule(robust: AggregatorConfig) -> Rule | None:
        """The built rule of ``strategy.robust``, or None for the mean (the method's own)."""
        return build_aggregator(robust) if is_robust(robust) else None

    @staticmethod
    def combine(rule: Rule, uploads: list[dict[str, torch.Tensor]],
                like: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``rule`` over the uploads flattened (the names of ``like``), in the workers'
        order, back in ``like``'s shapes and dtypes."""
        names = list(like)
        return unflat(rule(torch.stack([flat(u, names) for u in uploads])), like, names)


class FedAvg(ServerStar, Strategy[FedAvgState]):
    name = "fedavg"
    Config = FedAvgConfig
    State = FedAvgState
    batchable = True

    def __init__(self, cfg: FedAvgConfig, graph: GraphFacts) -> None:
        super().__init__(cfg, graph)
        self.require_star(graph)
        self.compressor = build_compressor(cfg.compression)
        # Uncompressed uploads stay plain tensors (the FedAvg of the paper, bit for bit).
        self.encoded = cfg.compression.name != "identity" or cfg.compression.error_feedback
        self.rule = self.server_rule(cfg.robust)

    def init_state(self, client: Client[FedAvgState], shared: Any) -> FedAvgState:
        cfg = self.cfg
        if client.cid == SERVER:
            return FedAvgState(outer=outer_optimizer(
                params.trainable_params(client.model).values(), cfg))
        return FedAvgState(
            optimizer=make_optimizer(client.model, cfg),
            feedback=ErrorFeedback(self.compressor) if cfg.compression.error_feedback else None,
        )

    @phase(role=WORKER)
    def local(self, client: Client[FedAvgState], inbox: Inbox,
              ctx: PhaseContext) -> list[Message]:
        state = client.state
        start = params.snapshot(client.model)
        client.stats["loss"] = local_steps(
            client, state.optimizer, ctx.task, self.cfg.local_steps, self.cfg.batch_size,
            self.cfg, ctx.round,
            runner=ctx.runner)
        live = params.trainable_params(client.model)
        delta = {name: start[name] - live[name].detach() for name in start}
        if state.feedback is not None:
            wire = state.feedback.compress(delta)
        elif self.encoded:
            wire = compress_tree(self.compressor, delta)
        else:
            wire = delta
        return [Message(client.cid, SERVER, "delta", wire)]

    @phase(role=SERVER_ROLE)
    def aggregate(self, client: Client[FedAvgState], inbox: Inbox,
                  ctx: PhaseContext) -> list[Message]:
        # the mean of the deltas that arrived (under injected faults some may be lost;
        # with none, θ stays as it is)
        arrived = list(inbox.newest("delta").values())
        live = params.trainable_params(client.model)
        if arrived:
            uploads = [decompress_tree(self.compressor, msg.payload, live) if self.encoded
                       else msg.payload for msg in arrived]
            if self.rule is None:
                for name, p in live.items():
                    p.grad = sum(u[name] for u in uploads) / len(uploads)
            else:  # the rule over the flattened uploads, in the workers' order
                for name, g in self.combine(self.rule, uploads, live).items():
                    live[name].grad = g
            client.state.outer.step()
        return self.to_neighbours(client, ctx, "global", params.snapshot(client.model))

    @phase(role=WORKER)
    def sync(self, client: Client[FedAvgState], inbox: Inbox,
             ctx: PhaseContext) -> None:
        for msg in inbox.newest("global").values():
            params.load(client.model, msg.payload)
