"""How the Ray executor tells a lost host from an error of the run.

Ray reports an actor that is gone — killed, its process or its node dead, or out of
reach — as :class:`ray.exceptions.RayActorError` on every call to it (its subclasses
``ActorDiedError`` and ``ActorUnavailableError`` included). It reports an actor whose
set-up raised the same way, marked ``actor_init_failed``: that is the run's own error (a
bad config, a missing file), raised as it is, never taken for a loss."""

from __future__ import annotations

from typing import Any

import ray


def died(exc: BaseException) -> bool:
    """Whether ``exc`` says the actor called is gone (rather than that the call failed)."""
    return isinstance(exc, ray.exceptions.RayActorError) and not exc.actor_init_failed


def gather(calls: dict[int, ray.ObjectRef]) -> tuple[dict[int, Any], list[int]]:
    """Each host's result (``calls``: host → its call), and the hosts whose actor died.

    Every call is waited for, even after a loss: the survivors' work is then done (a
    phase's results go on) and none is still running when the engine asks again."""
    out: dict[int, Any] = {}
    lost: list[int] = []
    for host, call in calls.items():
        try:
            out[host] = ray.get(call)
        except ray.exceptions.RayActorError as exc:
            if not died(exc):
                raise
            lost.append(host)
    return out, lost
