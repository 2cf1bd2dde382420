"""The ClientActor: hosts a group of clients (``ray.clients_per_actor`` of them).

One actor per client costs ~300 MB (each Ray worker imports torch), so groups are the
normal case, and ``ray.clients_per_actor: auto`` starts one actor per CPU (or GPU slot).
Each phase is one call: the actor fetches the payloads its inbox bundle refers to, runs
the strategy for each hosted client, and returns every outgoing message (large payloads
put in the object store, the driver gets their references) with the clients' statistics.
"""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import ray

from decent.backends.ray import transport
from decent.backends.ray.memory_plan import process_memory_mb, release_freed_memory
from decent.core.messages import Message
from decent.core.stats import Stat
from decent.engine.config import RunConfig
from decent.engine.group import ClientGroup, resolve_device
from decent.engine.plan import RunPlan
from decent.network.membership import RoundMembers


def views(frozen: dict[str, transport.EncodedTensor]) -> dict[str, Any]:
    """Tensors over the stored arrays (mapped read-only from the object store), by name."""
    return {name: transport.view(enc) for name, enc in frozen.items()}


class ClientHost:
    """What each ClientActor runs (Ray's actor classes below wrap it)."""

    def __init__(self, cfg: RunConfig, plan: RunPlan, cids: list[int], has_gpu: bool,
                 frozen: dict[str, transport.EncodedTensor] | None = None,
                 index: int = 0) -> None:
        self.setup(cfg, plan, cids, has_gpu, frozen, index)

    def setup(self, cfg: RunConfig, plan: RunPlan, cids: list[int], has_gpu: bool,
              frozen: dict[str, transport.EncodedTensor] | None = None,
              index: int = 0) -> None:
        """Build the run's clients ``cids`` here (at start, or in a host kept warm from
        an earlier run of the same driver: :mod:`.warm`)."""
        self.device = resolve_device(cfg, has_gpu)
        self.index = index  # its position among the run's actors
        # payloads kept for Ray Direct Transport until every receiver has them, by key
        self.held: dict[int, Any] = {}
        self.next_key = 0
        # ``frozen``: the run's frozen weights, mapped read-only from the object store
        self.group = ClientGroup(cfg, cids, self.device, plan,
                                 frozen=views(frozen) if frozen else None)
        release_freed_memory()  # the copy of the model it built, when it adopted the shared

    def ready(self) -> bool:
        return True

    def release(self) -> bool:
        """Drop every client and payload of the run, so the process can host the next."""
        self.group = None  # type: ignore[assignment]
        self.held.clear()
        gc.collect()
        release_freed_memory()
        return True

    def node_id(self) -> str:
        """The node this actor runs on."""
        return ray.get_runtime_context().get_node_id()

    def placement(self) -> tuple[str, list[int]]:
        """The node this actor runs on and the GPU ids Ray assigned it (none: CPU)."""
        return ray.get_runtime_context().get_node_id(), [int(g) for g in ray.get_gpu_ids()]

    def compute_charge(self) -> dict[str, Any]:
        """The FLOPs per step its clock charges and their source (the same in every actor)."""
        return self.group.clock.record()

    def frozen_weights(self) -> dict[str, transport.EncodedTensor]:
        """This process's frozen weights as arrays, for the object store (the caller owns
        the stored copy); empty when they cannot be shared."""
        return {name: transport.encode(t) for name, t in self.group.shareable().items()}

    def adopt(self, frozen: dict[str, transport.EncodedTensor]) -> int:
        """Switch to the stored frozen weights; their size in bytes."""
        self.group.adopt(views(frozen))
        release_freed_memory()
        return sum(enc.array.nbytes for enc in frozen.values())

    def memory_mb(self) -> dict[str, float]:
        """This process's memory now and at its peak (MB): resident and proportional."""
        return process_memory_mb()

    def run_phase(
        self, round_: int, step: int, phase: str, inboxes: dict[int, list[Message]] | None,
        members: RoundMembers | None = None,
    ) -> tuple[list[Message], dict[int, float], dict[int, dict[str, Stat]]]:
        inboxes = transport.receive(inboxes or {}, self.device)
        outgoing, compute = self.group.run_phase(round_, step, phase, inboxes, members)
        return transport.send(outgoing), compute, self.group.pop_stats()

    def run_phase_direct(
        self, round_: int, step: int, phase: str, inboxes: dict[int, list[Message]] | None,
        members: RoundMembers | None, release: list[int], *handed: Any,
    ) -> tuple[list[Message], dict[int, float], dict[int, dict[str, Stat]]]:
        """:meth:`run_phase` with payloads over Ray Direct Transport: ``handed`` are the
        ``hand_over`` results of the actors holding this bundle's payloads (Ray moved their
        tensors here); ``release`` are keys of this actor's that no message needs any more;
        large outgoing payloads stay here and only their keys go out."""
        for key in release:
            del self.held[key]
        inboxes = transport.resolve(inboxes or {}, self.index, self.held, handed,
                                    self.device)
        outgoing, compute = self.group.run_phase(round_, step, phase, inboxes, members)
        outgoing, self.next_key = transport.keep(outgoing, self.held, self.index,
                                                 self.next_key, self.device)
        return outgoing, compute, self.group.pop_stats()

    def hand_over(self, keys: list[int]) -> tuple[int, dict[int, Any]]:
        """The kept payloads under ``keys``, for another actor (called with Ray's
        ``tensor_transport`` option, so their tensors go straight to that actor)."""
        return self.index, {key: self.held[key] for key in keys}

    def held_payloads(self, keys: list[int]) -> dict[int, Any]:
        """The kept payloads under ``keys`` encoded for the object store (a checkpoint of
        messages in flight)."""
        return {key: transport.encode(self.held[key]) for key in keys}

    def held_keys(self) -> list[int]:
        return sorted(self.held)

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


ClientActor = ray.remote(ClientHost)
# Ray Direct Transport needs the option on the actor class itself, not on an instance;
# it also moves the actor's calls off the process's main thread, so only runs that ask
# for RDT use this one
DirectClientActor = ray.remote(enable_tensor_transport=True)(ClientHost)
