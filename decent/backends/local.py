"""``backend: local`` — every client in one process, in sequence, with an in-process
router. Same strategy code and same message path (sizes, edge checks, inbox order) as
on Ray; used by algorithm tests and small experiments."""

from __future__ import annotations

from typing import Any

import numpy as np

from decent.core.messages import Message, messages_to
from decent.core.stats import Stat
from decent.engine.config import RunConfig
from decent.engine.evaluation import combine, joiners, mean_model
from decent.engine.group import ClientGroup, resolve_device
from decent.engine.plan import RunPlan, build_plan
from decent.network.router import RoundTraffic, Router


class LocalBackend:
    def record_messages(self) -> list[Message]:
        """From now on, every message the router accepts (what crossed the network, sized),
        appended to the returned list: for checks of payloads and bytes."""
        posted: list[Message] = []
        post = self.router.post

        def recording(round_: int, phase: int, messages: Any, compute: Any = None) -> None:
            messages = list(messages)
            posted.extend(messages)
            post(round_, phase, messages, compute)

        self.router.post = recording  # type: ignore[method-assign]
        return posted

    def __init__(self, cfg: RunConfig, plan: RunPlan | None = None) -> None:
        self.cfg = cfg
        plan = plan or build_plan(cfg)
        self.group = ClientGroup(cfg, list(range(cfg.n)), resolve_device(cfg), plan)
        self.strategy = self.group.strategy
        self.router = Router(plan.topology, self.strategy.name, plan.network, plan.wire_faults)
        self.membership = plan.membership
        self.layout: dict[str, Any] = {}  # nothing to record: one process
        self.compute_charge = self.group.clock.record()

    def run_round(self, round_: int) -> tuple[dict[int, dict[str, Stat]], RoundTraffic]:
        members = None if self.membership is None else self.membership.at(round_)
        self.router.begin_round(None if members is None else members.present)
        for joiner, givers in joiners(self.group.topology, round_, members):
            if self.strategy.pulls_on_join:  # it fetches its model itself, in messages
                self.group.bootstrap(joiner, None)
                continue
            vectors = self.group.vectors(givers)
            mean = mean_model([vectors[g] for g in givers], len(givers))
            self.group.bootstrap(joiner, mean)
            for giver in givers:  # each sends its model: counted like any message
                self.router.account(giver, joiner, 4 * mean.size)
        for step, phase in enumerate(self.strategy.phases(round_)):
            inboxes = self.router.take(self.group.cids)
            outgoing, compute = self.group.run_phase(round_, step, phase, inboxes, members)
            self.router.post(round_, phase, outgoing, compute)
            self.router.advance()
        return self.group.pop_stats(), self.router.end_round()

    def edge_bytes_total(self) -> dict[tuple[int, int], int]:
        return dict(self.router.total_edge_bytes)

    def present(self, round_: int) -> list[int] | None:
        """The clients whose state the round's metrics cover (None: all)."""
        return None if self.membership is None else sorted(self.membership.at(round_).present)

    def evaluate(self, per_client: bool, present: list[int] | None = None) -> dict[str, float]:
        cids = self.group.cids if present is None else sorted(present)
        mean = mean_model([self.group.param_sum(cids)], len(cids))
        return combine([self.group.evaluate(mean, gmp=True, per_client=per_client,
                                            cids=cids)])

    def save_state(self) -> dict[str, Any]:
        router = self.router.save()
        router["ready"] = messages_to(router["ready"], "cpu")
        router["later"] = messages_to(router["later"], "cpu")
        return {"clients": self.group.save_clients(), "process": self.group.save_process(),
                "router": router}

    def load_state(self, state: dict[str, Any]) -> None:
        self.group.load(state["clients"], state["process"])
        router = dict(state["router"])
        router["ready"] = messages_to(router["ready"], self.group.device)
        router["later"] = messages_to(router["later"], self.group.device)
        self.router.load(router)

    def client_vectors(self) -> dict[int, np.ndarray]:
        return self.group.client_vectors()

    @property
    def max_edge_bytes_total(self) -> int:
        return self.router.max_edge_bytes_total

    def close(self) -> None:
        pass
