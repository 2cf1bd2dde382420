"""A client's inbox for one phase: a list of messages with the filters methods need.

The router delivers an inbox sorted by (source, phase sent, sequence). Without faults
every message is what the method expects; with them one may be lost, late (sent in an
earlier phase or round, beside the fresh one), returned undeliverable (its destination
left), or come from a client that is no neighbour this round (a time-varying graph).
The filters here are the one place that reads those cases.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from decent.core.messages import Message


class Inbox(list[Message]):
    """The messages of client ``cid`` for a phase of round ``round_``, whose neighbours
    this round are ``neighbours``. Iterating it gives every message, as delivered."""

    def __init__(self, messages: Iterable[Message] = (), cid: int = -1, round_: int = -1,
                 neighbours: Sequence[int] = ()) -> None:
        super().__init__(messages)
        self.cid = cid
        self.round = round_
        self.neighbours = tuple(neighbours)

    @classmethod
    def of(cls, messages: Iterable[Message], cid: int, ctx: Any) -> Inbox:
        """The inbox of ``cid`` in the phase ``ctx`` (a :class:`PhaseContext`)."""
        return cls(messages, cid, ctx.round, ctx.graph.in_neighbors[cid])

    def newest(self, tag: str | None = None) -> dict[int, Message]:
        """The newest delivered message (of ``tag``, if given) from each of this round's
        neighbours, in source order: what a gossip average reads. A lost one is missing;
        a late one is superseded by the fresh one; one from a non-neighbour is ignored."""
        neighbours = set(self.neighbours)
        newest: dict[int, Message] = {}
        for msg in self:  # sorted by (source, phase sent): the last per source is newest
            if msg.src in neighbours and not msg.undeliverable and (tag is None
                                                                     or msg.tag == tag):
                newest[msg.src] = msg
        return newest

    def fresh(self, tag: str | None = None) -> list[Message]:
        """The delivered messages (of ``tag``) sent in this round: a late one from an
        earlier round is stale for a method that works round by round."""
        return [m for m in self if m.sent_round == self.round and not m.undeliverable
                and (tag is None or m.tag == tag)]

    def delivered(self, tag: str | None = None) -> list[Message]:
        """Every message (of ``tag``) that came from its sender, whatever its round."""
        return [m for m in self if not m.undeliverable and (tag is None or m.tag == tag)]

    def bounced(self, tag: str | None = None) -> list[Message]:
        """This client's own messages (of ``tag``) that came back undeliverable: their
        destination had left or crashed."""
        return [m for m in self if m.undeliverable and m.src == self.cid
                and (tag is None or m.tag == tag)]
