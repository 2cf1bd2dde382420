"""Messages between clients and the wire sizes that the communication figures count.

A strategy never types a byte count: the platform derives the wire size of every payload
from what it holds, so a figure like "12 bytes per SeedFlood message" or "4·d bytes per
DSGD edge" is a consequence of the payload, not a claim.

Payload leaves and their sizes on the wire:

* ``torch.Tensor`` / ``numpy.ndarray`` — ``numel × element size`` of its dtype;
* :class:`Seed` — 8 bytes (a 64-bit RNG seed);
* :class:`Scalar` — 4 bytes (one float32);
* :class:`Declared` — a compressed payload that states its own size; the compression
  module computes it from the arrays it really sends (indices + values at their dtypes);
* ``dict`` / ``list`` / ``tuple`` of the above — the sum of the values. Dict keys (e.g.
  parameter names) are free: both ends know the model architecture.

Message headers (src, dst, tag, meta) are not counted: a real system would amortise them
over a connection, and every method here would pay the same few bytes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from decent.core.errors import StrategyError
from decent.core.storable import storable
from decent.core.tree import tree_leaves, tree_map

SEED_BYTES = 8
SCALAR_BYTES = 4


@storable
@dataclass(frozen=True)
class Seed:
    """A 64-bit seed: 8 bytes on the wire."""

    value: int


@storable
@dataclass(frozen=True)
class Scalar:
    """A float32 scalar: 4 bytes on the wire."""

    value: float


@storable
@dataclass(frozen=True)
class Declared:
    """A payload whose wire size is computed by the code that encoded it.

    Used for compressed payloads where the in-memory form (say, a dense tensor with
    zeros) differs from what crosses the network (index/value pairs)."""

    payload: Any
    nbytes: int


# What a payload may hold beyond dicts, lists and tuples for the walks that look inside
# it (moving, encoding, attacking its tensors): a compressed payload, whose stated size
# is kept. wire_size does not look inside: the stated size is what it counts.
PAYLOAD_NODES: tuple[type, ...] = (Declared,)


@storable
@dataclass
class Message:
    """One message from client ``src`` to its neighbour ``dst``.

    ``seq`` and ``nbytes`` are filled in by the platform when the message is posted:
    ``seq`` orders messages of one source within a phase (inboxes are sorted by
    ``(src, seq)``, so delivery order never depends on scheduling)."""

    src: int
    dst: int
    tag: str
    payload: Any
    seq: int = 0
    nbytes: int = 0
    # Header fields a real protocol carries in a few bytes per message (e.g. the origin
    # and iteration of a flooded update: ints, or arrays of them, one entry per item);
    # like src/dst/tag they are not counted.
    meta: tuple[Any, ...] = ()
    # Set by the router when the message is posted: the round and the run-wide phase
    # number it was sent in (a message delayed by a fault arrives in a later one).
    sent_round: int = -1
    sent_phase: int = -1
    # True when the router returns the message to its sender: its destination was not
    # present (it left or crashed)
    undeliverable: bool = False
    # True when a Byzantine sender's attack is already in the payload (PhaseContext.tamper):
    # the platform does not attack it again on the way out
    tampered: bool = False
    # τ ≥ 1: the transfer overlaps the sender's next τ phases of computation (OSGP). The
    # message is sent when its phase starts, is delivered τ phases later, and holds up
    # that phase only if it has not arrived by then. 0: delivered next phase, its transfer
    # on its own phase's critical path after the sender's compute.
    overlap: int = 0
    # The updates one message carries (a bundle of flooded updates sent together on one
    # edge): the figures count that many messages, as a protocol that sent each alone
    # would. A fault drops or delays the bundle whole, as it would the one packet.
    items: int = 1


def _leaf_size(leaf: Any) -> int:
    if leaf is None:
        return 0
    if isinstance(leaf, torch.Tensor):
        return leaf.numel() * leaf.element_size()
    if isinstance(leaf, np.ndarray):
        return int(leaf.nbytes)
    if isinstance(leaf, Seed):
        return SEED_BYTES
    if isinstance(leaf, Scalar):
        return SCALAR_BYTES
    if isinstance(leaf, Declared):
        return int(leaf.nbytes)
    raise StrategyError(
        f"payload of type {type(leaf).__name__} has no wire size: send tensors, "
        "wrap seeds in Seed and float scalars in Scalar, or a Declared compressed payload"
    )


def wire_size(payload: Any) -> int:
    """Bytes that ``payload`` occupies on the wire (see the module docstring)."""
    # no nodes: a Declared payload is a leaf here, counted at the size it states
    return sum(_leaf_size(leaf) for leaf in tree_leaves(payload))


def payload_to(payload: Any, device: torch.device | str) -> Any:
    """``payload`` with every tensor moved to ``device`` (a copy when it moves)."""
    return tree_map(lambda t: t.detach().to(device), payload, leaf=torch.Tensor,
                    nodes=PAYLOAD_NODES)


def messages_to(messages: dict[Any, list[Message]], device: torch.device | str
                ) -> dict[Any, list[Message]]:
    """A mapping of message lists with every payload on ``device``."""
    return {key: [dataclasses.replace(m, payload=payload_to(m.payload, device)) for m in msgs]
            for key, msgs in messages.items()}
