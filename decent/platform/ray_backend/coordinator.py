"""The Coordinator actor: the router of a Ray run.

ClientActors post each phase's outgoing messages in one call; payloads are object refs
(put by the senders), so the Coordinator checks edges and counts bytes without touching
tensor data. When the driver closes a phase, the Coordinator packs each actor's inboxes
into one object and returns the references, which the driver hands to the actors' next
phase call: messages never pass through the driver.
"""

from __future__ import annotations

import ray

from decent.core.messages import Message
from decent.network.router import RoundTraffic, Router
from decent.platform.config import RunConfig
from decent.platform.plan import build_plan


@ray.remote(num_cpus=0)
class Coordinator:
    def __init__(self, cfg: RunConfig, groups: list[list[int]]) -> None:
        self.groups = groups
        plan = build_plan(cfg)
        self.router = Router(plan.topology, cfg.strategy.name, plan.network, plan.wire_faults)

    def post(self, round_: int, phase: str, messages: list[Message],
             compute: dict[int, float]) -> None:
        self.router.post(round_, phase, messages, compute)

    def advance(self) -> list[ray.ObjectRef]:
        self.router.advance()
        return [ray.put(self.router.take(cids)) for cids in self.groups]

    def end_round(self) -> tuple[RoundTraffic, int]:
        return self.router.end_round(), self.router.max_edge_bytes_total
