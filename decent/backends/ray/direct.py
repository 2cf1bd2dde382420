"""Payloads over Ray Direct Transport (RDT): the driver's side.

On GPU actors the object store costs each large payload a device→host copy at the sender,
a host copy into the store, and a host→device copy at the receiver. With RDT the sender's
actor keeps the payload's tensors where they are (:func:`.transport.keep`); when the actor
of a client it is addressed to runs, the driver asks the sender's actor to hand over
everything that receiver needs — one ``hand_over`` call per (sender actor, receiver actor)
pair per phase, passed to the receiver's ``run_phase_direct`` as a positional argument —
and Ray moves the tensors actor to actor: NCCL between GPUs, Gloo between CPUs. The driver
sees only message headers and :class:`.transport.Held` keys.

Ray's constraints shape this (Ray 2.60, RDT alpha): both actors need
``enable_tensor_transport``, they must share a collective group, and an RDT reference
must be a top-level argument of a call made by the process that created the group.
Each transfer is a send on the sender's and a receive on the receiver's one transfer
thread, queued when the receiving call is submitted — or, when the hand-over has not
finished yet, whenever it does: in the order hand-overs happen to finish. Two actors can
then queue each other's send and receive in opposite orders, and Gloo's and NCCL's
point-to-point calls wait for their peer: both wait for ever. So the driver waits for every
hand-over of a phase before submitting any receiving call (:meth:`DirectPayloads.settled`):
every transfer is then queued by the driver's one thread in one order, which every actor's
queue follows, and the earliest transfer not done always has both its ends ready.

The driver also decides when a kept payload may go: after each phase, any key no message
in flight refers to any more (delivered, dropped by a fault, cut by a partition) is
released at its actor's next call. An actor's death ends this: the payloads it kept die
with it, so the run goes back to its checkpoint with fresh actors and a fresh group.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import ray

from decent.backends.ray.losses import gather
from decent.backends.ray.transport import Held
from decent.core.errors import HostsLost
from decent.core.messages import Message
from decent.core.tree import tree_leaves, tree_map

# RDT's tensor transports and the collective backend each needs
COLLECTIVE_BACKEND = {"gloo": "torch_gloo", "nccl": "nccl"}
# how long a finished hand-over's transfer metadata may trail its completion
METADATA_WAIT_S = 5.0


class DirectPayloads:
    """One run's RDT: its collective group and which kept payloads each actor may drop."""

    def __init__(self, transport: str, actors: list[Any]) -> None:
        from ray.experimental.collective import create_collective_group

        self.transport = transport
        self.group = create_collective_group(actors, backend=COLLECTIVE_BACKEND[transport])
        self.kept: dict[int, set[int]] = defaultdict(set)  # actor → keys it keeps
        self.releases: dict[int, list[int]] = {}  # actor → keys to drop at its next call

    @property
    def path(self) -> str:
        return f"rdt {self.transport}"

    def hand_overs(self, actors: list[Any], receiver: int,
                   inbox: dict[int, list[Message]]) -> list[ray.ObjectRef]:
        """One RDT reference per other actor holding payloads ``receiver``'s inbox bundle
        needs."""
        need = held_keys(m for msgs in inbox.values() for m in msgs)
        need.pop(receiver, None)  # its own: handed over in the process
        return [actors[sender].hand_over.options(tensor_transport=self.transport)
                .remote(sorted(keys)) for sender, keys in sorted(need.items())]

    def settled(self, refs: Iterable[ray.ObjectRef]) -> None:
        """Return once every hand-over in ``refs`` has finished (or failed: its receiver
        fails with it) and the driver knows where its tensors are, so that submitting
        the receiving calls queues their transfers at once, in the driver's order."""
        refs = list(refs)
        if not refs:
            return
        ray.wait(refs, num_returns=len(refs), fetch_local=False)
        manager = ray._private.worker.global_worker.rdt_manager
        for ref in refs:
            # set by a callback that may trail the task's completion by a moment; a
            # hand-over that failed never gets one (nothing to wait for then)
            with contextlib.suppress(KeyError):  # one freed after failing: not managed
                manager.wait_for_tensor_transport_metadata(ref.hex(),
                                                           timeout=METADATA_WAIT_S)

    def posted(self, actor: int, messages: Iterable[Message]) -> None:
        """Record the keys ``actor`` kept for the messages it just sent."""
        self.kept[actor].update(h.key for h in tree_leaves([m.payload for m in messages],
                                                           leaf=Held))

    def settle(self, in_flight: Iterable[Message]) -> None:
        """After a phase: every kept key no message in flight refers to is released."""
        live = held_keys(in_flight)
        for actor, keys in self.kept.items():
            gone = keys - live[actor]
            if gone:
                self.releases[actor] = sorted(set(self.releases.get(actor, [])) | gone)
                keys -= gone

    def release(self, actor: int) -> list[int]:
        """The keys ``actor`` drops at this call (and forgets)."""
        return self.releases.pop(actor, [])

    def fetch(self, actors: list[Any], *queues: dict[Any, list[Message]]
              ) -> list[dict[Any, list[Message]]]:
        """``queues`` of messages with every kept payload fetched through the object store
        (encoded arrays, one call per actor holding some), for a checkpoint;
        :class:`HostsLost` naming the actors that died."""
        want = held_keys(m for queue in queues for msgs in queue.values() for m in msgs)
        parts, lost, _ = gather({a: actors[a].held_payloads.remote(sorted(keys))
                                 for a, keys in want.items()})
        if lost:  # what they kept died with them: no whole checkpoint to be had
            raise HostsLost(lost)
        got = {(a, key): payload for a, part in parts.items()
               for key, payload in part.items()}
        return [{k: [replace(m, payload=tree_map(lambda h: got[(h.actor, h.key)], m.payload,
                                                 leaf=Held)) for m in msgs]
                 for k, msgs in queue.items()} for queue in queues]

    def close(self) -> None:
        from ray.experimental.collective import destroy_collective_group

        # fails only when the actors are gone already: nothing left to tear down then
        with contextlib.suppress(Exception):
            destroy_collective_group(self.group)


def held_keys(messages: Iterable[Message]) -> dict[int, set[int]]:
    """The kept payloads ``messages`` refer to: keys by the actor keeping them."""
    keys: dict[int, set[int]] = defaultdict(set)
    for held in tree_leaves([m.payload for m in messages], leaf=Held):
        keys[held.actor].add(held.key)
    return keys
