"""``backend: local`` — every client in one process, in sequence: the engine's executor
with one host. Same strategy code and the same message path (sizes, edge checks, inbox
order) as on Ray; used by algorithm tests and small experiments."""

from __future__ import annotations

from typing import Any

import numpy as np

from decent.backends.ray.config import LossPolicy
from decent.core.messages import Message, messages_to
from decent.engine.config import RunConfig
from decent.engine.executor import Inboxes, PhaseResult
from decent.engine.group import ClientGroup, resolve_device
from decent.engine.loop import Engine
from decent.engine.plan import RunPlan, build_plan
from decent.network.membership import RoundMembers


class InProcess:
    """The executor that hosts every client of the run in this process (host 0)."""

    # nothing here can be lost: it never raises HostsLost
    loss_policy = LossPolicy("churn", 0)

    def __init__(self, cfg: RunConfig, plan: RunPlan) -> None:
        self.layout: dict[str, Any] = {}  # nothing to record: one process
        self.group = ClientGroup(cfg, list(range(cfg.n)), resolve_device(cfg), plan)
        self.groups = [self.group.cids]
        self.compute_charge = self.group.clock.record()

    def run_phase(self, round_: int, step: int, phase: str, inboxes: dict[int, Inboxes],
                  members: RoundMembers | None) -> dict[int, PhaseResult]:
        outgoing, compute = self.group.run_phase(round_, step, phase, inboxes[0], members)
        return {0: PhaseResult(outgoing, compute, self.group.pop_stats())}

    def vectors(self, cids: list[int]) -> dict[int, np.ndarray]:
        return self.group.vectors(cids)

    def bootstrap(self, cid: int, vector: np.ndarray | None) -> None:
        self.group.bootstrap(cid, vector)

    def param_sums(self, parts: dict[int, list[int]]) -> list[np.ndarray | None]:
        return [self.group.param_sum(cids) for cids in parts.values()]

    def evaluate(self, mean: np.ndarray, per_client: bool, parts: dict[int, list[int]]
                 ) -> list[dict[str, Any]]:
        return [self.group.evaluate(mean, k == 0, per_client, cids)
                for k, cids in enumerate(parts.values())]

    def save(self, hosts: list[int]) -> tuple[dict[int, Any], dict[str, Any]]:
        return self.group.save_clients(), self.group.save_process()

    def load(self, clients: dict[int, Any], process: dict[str, Any]) -> None:
        self.group.load(clients, process)

    def client_vectors(self, hosts: list[int]) -> dict[int, np.ndarray]:
        return self.group.client_vectors()

    def storable(self, *queues: dict[Any, list[Message]]) -> list[dict[Any, list[Message]]]:
        return [messages_to(queue, "cpu") for queue in queues]

    def routable(self, *queues: dict[Any, list[Message]]) -> list[dict[Any, list[Message]]]:
        return [messages_to(queue, self.group.device) for queue in queues]

    def settle(self, in_flight: Any) -> None:
        pass  # payloads are plain tensors: nothing kept for anyone

    def close(self) -> None:
        pass


def local_engine(cfg: RunConfig) -> Engine:
    """The engine of ``cfg`` with every client in this process, its plan built here: for
    tests, benchmarks and notebooks (a run builds its plan once, in the runner)."""
    plan = build_plan(cfg)
    return Engine(cfg, plan, InProcess(cfg, plan))
