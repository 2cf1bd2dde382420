"""The ClientActor: hosts a group of clients (``ray.clients_per_actor`` of them).

One actor per client costs ~300 MB (each Ray worker imports torch), so groups are the
normal case: 128 clients fit a laptop as 16 actors of 8. Each phase the actor fetches its
inbox bundle, runs the strategy for each hosted client, and posts all outgoing messages
to the Coordinator in one batched call.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import ray

from decent.core.messages import Message
from decent.core.stats import Stat
from decent.network.membership import RoundMembers
from decent.platform.config import RunConfig
from decent.platform.group import ClientGroup, resolve_device
from decent.platform.ray_backend import transport


@ray.remote
class ClientActor:
    def __init__(self, cfg: RunConfig, cids: list[int], coordinator: Any, has_gpu: bool) -> None:
        self.device = resolve_device(cfg, has_gpu)
        self.group = ClientGroup(cfg, cids, self.device)
        self.coordinator = coordinator

    def ready(self) -> bool:
        return True

    def run_phase(
        self, round_: int, step: int, phase: str, inboxes: dict[int, list[Message]] | None,
        members: RoundMembers | None = None,
    ) -> dict[int, dict[str, Stat]]:
        inboxes = transport.receive(inboxes or {}, self.device)
        outgoing, compute = self.group.run_phase(round_, step, phase, inboxes, members)
        ray.get(self.coordinator.post.remote(round_, phase, transport.send(outgoing), compute))
        return self.group.pop_stats()

    def param_sum(self, cids: list[int] | None = None) -> np.ndarray | None:
        return self.group.param_sum(cids)

    def evaluate(self, mean: np.ndarray, gmp: bool, per_client: bool,
                 cids: list[int] | None = None) -> dict[str, Any]:
        return self.group.evaluate(mean, gmp, per_client, cids)

    def vectors(self, cids: list[int]) -> dict[int, np.ndarray]:
        return self.group.vectors(cids)

    def bootstrap(self, cid: int, vector: np.ndarray) -> None:
        self.group.bootstrap(cid, vector)

    def client_vectors(self) -> dict[int, np.ndarray]:
        return self.group.client_vectors()

    def save(self, with_process: bool) -> tuple[dict[int, Any], dict[str, Any] | None]:
        """The hosted clients' checkpoint, and (from one actor only: every process holds
        the same shared state) the process's."""
        process = self.group.save_process() if with_process else None
        return self.group.save_clients(), process

    def load(self, clients: dict[int, Any], process: dict[str, Any]) -> None:
        self.group.load(clients, process)

