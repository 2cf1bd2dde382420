"""The Coordinator actor: the router of a Ray run.

ClientActors post each phase's outgoing messages in one call; payloads are object refs
(put by the senders), so the Coordinator checks edges and counts bytes without touching
tensor data. When the driver closes a phase, the Coordinator packs each actor's inboxes
into one object and returns the references, which the driver hands to the actors' next
phase call: messages never pass through the driver.
"""

from __future__ import annotations

import ray
import torch

from decent.core.messages import Message
from decent.network.router import RoundTraffic, Router
from decent.platform.config import RunConfig
from decent.platform.plan import build_plan
from decent.platform.ray_backend import transport


@ray.remote(num_cpus=0)
class Coordinator:
    def __init__(self, cfg: RunConfig, groups: list[list[int]]) -> None:
        self.groups = groups
        plan = build_plan(cfg)
        self.router = Router(plan.topology, cfg.strategy.name, plan.network, plan.wire_faults)

    def edge_bytes_total(self) -> dict[tuple[int, int], int]:
        return dict(self.router.total_edge_bytes)

    def begin_round(self, present: frozenset[int] | None) -> None:
        self.router.begin_round(present)

    def depart(self, clients: frozenset[int], unread: dict[int, list[Message]] | None
               ) -> None:
        """Clients whose actor died this round; ``unread`` is the inbox bundle it never
        read (Ray resolves the reference before the call)."""
        self.router.depart(clients, unread)

    def account(self, src: int, dst: int, nbytes: int) -> None:
        self.router.account(src, dst, nbytes)

    def post(self, round_: int, phase: str, messages: list[Message],
             compute: dict[int, float]) -> None:
        self.router.post(round_, phase, messages, compute)

    def advance(self) -> list[ray.ObjectRef]:
        self.router.advance()
        return [ray.put(self.router.take(cids)) for cids in self.groups]

    def save_router(self) -> dict:
        """The router between rounds, with delayed messages' payloads fetched and
        decoded to CPU tensors (the next phase's inboxes are with the driver)."""
        saved = self.router.save()
        saved["later"] = transport.receive(saved["later"], torch.device("cpu"))
        return saved

    def load_router(self, saved: dict) -> None:
        saved = dict(saved, ready={})
        saved["later"] = {k: transport.send(msgs) for k, msgs in saved["later"].items()}
        self.router.load(saved)

    def end_round(self) -> tuple[RoundTraffic, int]:
        return self.router.end_round(), self.router.max_edge_bytes_total
