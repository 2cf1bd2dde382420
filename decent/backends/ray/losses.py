"""How the Ray executor tells a lost host from an error of the run.

Ray reports an actor that is gone — killed, its process or its node dead, or out of
reach — as :class:`ray.exceptions.RayActorError` on every call to it (its subclasses
``ActorDiedError`` and ``ActorUnavailableError`` included). It reports an actor whose
set-up raised the same way, marked ``actor_init_failed``: that is the run's own error (a
bad config, a missing file), raised as it is, never taken for a loss.

A payload in the object store is owned by the actor that put it and lives in its node's
store: when that actor or node is gone, a live actor that reads it fails with
:class:`ray.exceptions.ObjectLostError` (``OwnerDiedError`` for a dead owner), wrapped in
the ``RayTaskError`` of its call. Its actor is not lost; what it was to read is. Over Ray
Direct Transport, a payload whose sender died after its call returned never arrives: the
receiver's call fails with RDT's ``TimeoutError`` (its object "not found in RDT object
store"), and that too is a payload lost, not an error of the run.

Any other failed call is an error of the run, raised on the driver; decent's own errors
(a strategy's mistake in a phase, a bad value a user wrote) come out of Ray's wrapper as
they were raised, so that they read as on the local backend."""

from __future__ import annotations

from typing import Any

import ray

from decent.core.errors import ConfigError, StrategyError


def died(exc: BaseException) -> bool:
    """Whether ``exc`` says the actor called is gone (rather than that the call failed)."""
    return isinstance(exc, ray.exceptions.RayActorError) and not exc.actor_init_failed


# what RDT's store says when a transfer to the receiving actor never came
RDT_NEVER_CAME = "not found in RDT object store"


def payload_lost(exc: BaseException) -> bool:
    """Whether ``exc`` says a payload the call read was lost with the actor that owned it
    (from the object store, or over RDT from a sender that died once its call returned)."""
    if isinstance(exc, ray.exceptions.ObjectLostError):
        return True
    cause = exc.cause if isinstance(exc, ray.exceptions.RayTaskError) else None
    return isinstance(cause, ray.exceptions.ObjectLostError) or (
        isinstance(cause, TimeoutError) and RDT_NEVER_CAME in str(cause))


def own_error(exc: BaseException) -> BaseException:
    """The error a failed call stands for: decent's own (a strategy's mistake in a phase,
    named where it happened; a bad value a user wrote), unwrapped from the
    ``RayTaskError`` Ray wraps it in, so that it reads as on the local backend; anything
    else as Ray raised it."""
    cause = getattr(exc, "cause", None)
    if isinstance(exc, ray.exceptions.RayTaskError) and \
            isinstance(cause, (ConfigError, StrategyError)):
        return cause
    return exc


def gather(calls: dict[int, ray.ObjectRef], first_loss_ends: bool = False
           ) -> tuple[dict[int, Any], list[int], list[int]]:
    """Each host's result (``calls``: host → its call), the hosts whose actor died, and
    those whose call failed because a payload it read was lost (:func:`payload_lost`).

    Every call is waited for, even after a loss: the survivors' work is then done (a
    phase's results go on) and none is still running when the engine asks again. With
    ``first_loss_ends`` (over RDT, where a loss always sends the run back to its
    checkpoint) the first loss ends the wait: a receiver whose hand-over came from the
    actor that died waits out RDT's 60 s transfer timeout before it fails, and its actor
    is killed with the others when the run restarts."""
    out: dict[int, Any] = {}
    lost: list[int] = []
    unread: list[int] = []
    pending = {call: host for host, call in calls.items()}
    while pending:
        # results as they come (not in host order): a death is seen as soon as it happens
        ready, _ = ray.wait(list(pending), num_returns=1)
        host = pending.pop(ready[0])
        try:
            out[host] = ray.get(ready[0])
        except ray.exceptions.RayError as exc:
            if payload_lost(exc):
                unread.append(host)
                continue
            if not died(exc):
                raise own_error(exc) from None
            lost.append(host)
            if first_loss_ends:
                break
    return dict(sorted(out.items())), sorted(lost), sorted(unread)
