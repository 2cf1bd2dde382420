"""What the engine asks of the processes that host clients: the :class:`Executor`.

The engine (:mod:`.loop`) owns the round — phases, routing, faults, membership, the
clock, evaluation and checkpoints — and an executor only runs client groups where they
live: all in this process (:mod:`decent.backends.local`) or on Ray actors
(:mod:`decent.backends.ray.executor`). Clients are addressed by *host*: the index of the
group (``groups[h]``) that hosts them.

A host can be lost (its process dies: a Ray actor killed, its node gone). Every call that
reaches hosts reports that the one same way: it raises
:class:`~decent.core.errors.HostsLost` naming the hosts that died during it, once the
other hosts' calls have come back; a lost host is never called again. For a phase,
whose work cannot be done twice, the exception carries the survivors' results; every
other call only reads, and the engine asks it again of the survivors. An executor that
cannot lose a host (this process) never raises it."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from decent.backends.ray.config import LossPolicy, RayConfig
from decent.core.messages import Message
from decent.core.registry import Registry
from decent.core.stats import Stat
from decent.network.membership import RoundMembers

Inboxes = dict[int, list[Message]]  # client → the messages it reads this phase


@dataclass
class PhaseResult:
    """What one host returns from a phase: its clients' outgoing messages (sized), each
    one's compute time in simulated seconds and the statistics they recorded."""

    outgoing: list[Message]
    compute: dict[int, float]
    stats: dict[int, dict[str, Stat]]


class Executor(Protocol):
    groups: list[list[int]]  # the clients of each host, in id order
    layout: dict[str, Any]  # how the run is laid out (Ray: actors), for the summary
    compute_charge: dict[str, Any]  # the FLOPs per step the clock charges, for the summary
    # what a lost host means to this run (the engine asks; RDT payloads die with their
    # actor, so over RDT a loss always sends the run back to its checkpoint)
    loss_policy: LossPolicy

    def run_phase(self, round_: int, step: int, phase: str, inboxes: dict[int, Inboxes],
                  members: RoundMembers | None) -> dict[int, PhaseResult]:
        """Run ``phase`` on every host in ``inboxes`` (host → its clients' inboxes); per
        host, in host order, its result. Hosts lost: ``HostsLost(hosts, partial)``, with
        ``partial`` the results of the others, by host."""
        ...

    def vectors(self, cids: list[int]) -> dict[int, np.ndarray]: ...
    def bootstrap(self, cid: int, vector: np.ndarray | None) -> None: ...

    def param_sums(self, parts: dict[int, list[int]]) -> list[np.ndarray | None]:
        """Per host of ``parts`` (host → clients), Σ θ_i over those clients in float64."""
        ...

    def evaluate(self, mean: np.ndarray, per_client: bool, parts: dict[int, list[int]]
                 ) -> list[dict[str, Any]]:
        """Per host of ``parts``, its evaluation report (the first host also evaluates the
        mean model itself)."""
        ...

    def save(self, hosts: list[int]) -> tuple[dict[int, Any], dict[str, Any]]:
        """The checkpoint of every client on ``hosts``, and the process state they share."""
        ...

    def load(self, clients: dict[int, Any], process: dict[str, Any]) -> None:
        """Every host's clients and process state from a checkpoint (``clients``: by id;
        a client lost before it has none)."""
        ...

    def client_vectors(self, hosts: list[int]) -> dict[int, np.ndarray]: ...

    def storable(self, *queues: dict[Any, list[Message]]) -> list[dict[Any, list[Message]]]:
        """Queues of messages in flight with their payloads as CPU tensors (a checkpoint)."""
        ...

    def routable(self, *queues: dict[Any, list[Message]]) -> list[dict[Any, list[Message]]]:
        """Stored queues made ready for this executor's router (the inverse)."""
        ...

    def settle(self, in_flight: list[Message]) -> None:
        """After a phase: what ``in_flight`` (every message not yet delivered) no longer
        needs may be released."""
        ...

    def close(self) -> None: ...


@dataclass
class LocalConfig:
    """``backend: local`` has nothing to set: every client runs in this process."""


@dataclass(frozen=True)
class ExecutorSpec:
    """A registered executor: where its class lives (``module:Class``, imported when a run
    starts one, so that naming Ray's executor does not import Ray) and the run-config
    section that holds its settings (None: it has none)."""

    target: str
    section: str | None = None

    def start(self, cfg: Any, plan: Any) -> Executor:
        module, _, name = self.target.partition(":")
        return getattr(importlib.import_module(module), name)(cfg, plan)

    def loss_policy(self, cfg: Any) -> LossPolicy:
        """What a lost host means under ``cfg``, asked before any executor starts (the
        runner's restart budget)."""
        section = getattr(cfg, self.section) if self.section else None
        return section.loss_policy() if section is not None else LossPolicy("churn", 0)

    def check_device(self, cfg: Any) -> None:
        """Refuse ``cfg.device`` where this executor's settings cannot give it (one line),
        before any executor starts; a section without ``check_device`` takes any."""
        section = getattr(cfg, self.section) if self.section else None
        check = getattr(section, "check_device", None)
        if check is not None:
            check(cfg.device)


# ``backend:`` names one of these; a user's module (``imports:``) may register its own
EXECUTORS = Registry("backend")
EXECUTORS.register("local", LocalConfig, ExecutorSpec("decent.backends.local:InProcess"))
EXECUTORS.register("ray", RayConfig, ExecutorSpec("decent.backends.ray.executor:RayActors",
                                                  section="ray"))


def executor_spec(backend: str) -> ExecutorSpec:
    spec = EXECUTORS.entry(backend).build
    assert isinstance(spec, ExecutorSpec)
    return spec
