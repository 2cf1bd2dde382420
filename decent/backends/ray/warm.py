"""Actor processes kept warm between the runs of one driver.

A ClientActor's process imports torch and this package before it builds its clients:
~2–3 s of CPU on 2 cores, most of what starting a small run on Ray costs. A driver that
runs several configs on a Ray it did not start (a notebook, a script, the test suite)
hands its actors back when a run ends; the next run with the same actor shape takes
them and builds its clients there instead of starting processes. Each host drops every
client of the run before it is kept (``ClientHost.release``), and a run's results do not
depend on the process its clients are built in (every client's state comes from the
seed), so a warm host computes what a fresh one would.

Only object-store actors outside a placement group are kept: RDT actors belong to the
communicator group of their run, and a placement group (a Tune trial's) is removed with
its actors when the trial ends."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable
from typing import Any

import ray

# idle hosts by (Ray job, the driver's node, actor shape): a handle is valid in its job
# only, and a Ray started again numbers its jobs from 1 again (its node ids are new)
_IDLE: dict[Hashable, list[Any]] = {}


def shape_key(*shape: Hashable) -> Hashable | None:
    """The pool key of an actor shape in this Ray job; None where hosts are not kept."""
    context = ray.get_runtime_context()
    if context.get_placement_group_id() is not None:
        return None
    return (context.get_job_id(), context.get_node_id(), *shape)


def start(key: Hashable | None, fresh: Callable[[], Any], *setup: Any,
          **kw: Any) -> tuple[Any, Any]:
    """A host set up with ``setup`` — a kept one that still answers, else ``fresh()`` —
    and the reference to wait on for its set-up (raising what the set-up raised)."""
    idle = _IDLE.get(key, []) if key is not None else []
    while idle:
        host = idle.pop()
        try:
            ray.get(host.ready.remote(), timeout=30)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            ray.kill(host)
            continue
        return host, host.setup.remote(*setup, **kw)
    host = fresh()
    return host, host.ready.remote()


def make_room(key: Hashable | None) -> int:
    """Kill the kept hosts of every other shape that reserve CPUs or a GPU share: Ray
    queues an actor until its resources are free, so a run of another shape (a quarter
    GPU after a half, or any RDT run, whose hosts are never kept) would wait for them for
    ever. Hosts that reserve nothing block no one and stay. How many were killed."""
    killed = 0
    for other in [k for k in _IDLE if k != key and isinstance(k, tuple) and any(k[2:])]:
        for host in _IDLE.pop(other):
            with contextlib.suppress(Exception):  # a handle of an earlier Ray job
                ray.kill(host)
            killed += 1
    return killed


def keep(key: Hashable | None, hosts: list[Any]) -> int:
    """Hand ``hosts`` back (each drops its clients first); those that cannot be kept are
    killed. How many were kept."""
    if key is None:
        for host in hosts:
            ray.kill(host)
        return 0
    released = [(host, host.release.remote()) for host in hosts]
    kept = []
    for host, call in released:
        try:
            ray.get(call)
            kept.append(host)
        except ray.exceptions.RayActorError:  # it died during the run unnoticed
            ray.kill(host)
    _IDLE.setdefault(key, []).extend(kept)
    return len(kept)


def idle(key: Hashable | None) -> int:
    """How many warm hosts of shape ``key`` wait for a run."""
    return len(_IDLE.get(key, [])) if key is not None else 0


def drop_all() -> None:
    """Kill every kept host (before this driver shuts its Ray down)."""
    for hosts in _IDLE.values():
        for host in hosts:
            ray.kill(host)
    _IDLE.clear()
