"""Errors a user can cause: one clear line naming the field and the fix."""

from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
    """A bad value a user wrote (config file, override, CLI flag).

    The CLI prints ``error: <field>: <message>`` and exits with status 2, without a
    traceback; nothing is written to disk before every config error has been raised.
    """

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        # pickled whole, so it crosses process boundaries (a probe process, a Ray worker)
        return ConfigError, (self.field, self.message)


class StrategyError(RuntimeError):
    """A strategy broke the platform's contract (e.g. sent along a non-edge).

    This is a bug in strategy code, not a bad value a user wrote: the CLI prints
    ``error: <message>`` and exits with status 1, without a traceback.
    """


class PhaseError(StrategyError):
    """A strategy's own code failed while a phase ran: an exception it raised, or a
    contract it broke (a payload with no wire size, a message to a client that is not a
    neighbour, a state that is not its ``State``). It names where in one line: the
    strategy, the phase, the client and the round.

    ``trace`` is the full traceback where the error happened (on Ray: inside the actor,
    which the driver's own traceback does not show); the runner writes it to the run
    directory's ``error.log`` and sets ``log`` to that file."""

    def __init__(self, strategy: str, phase: str, client: int, round_: int, message: str,
                 trace: str = "") -> None:
        self.strategy, self.phase, self.client, self.round = strategy, phase, client, round_
        self.message = message
        self.trace = trace
        self.log: str | None = None
        super().__init__(f"strategy '{strategy}', phase '{phase}', client {client}, "
                         f"round {round_}: {message}")

    def __reduce__(self) -> tuple[type, tuple[str, str, int, int, str, str]]:
        # pickled whole: it is raised inside a Ray actor and read on the driver
        return PhaseError, (self.strategy, self.phase, self.client, self.round, self.message,
                            self.trace)


class ActorLost(RuntimeError):
    """A process hosting clients died, and the run asked to restart from its last
    checkpoint rather than go on without them (``ray.on_actor_death: restart``).
    ``loss``: the round, the clients and the node of the loss, where the engine knew them
    (for the summary's ``actor_losses``)."""

    def __init__(self, message: str, loss: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.loss = loss


class HostsLost(RuntimeError):
    """The processes of ``hosts`` (Ray: their actors) died during one executor call: how
    every executor call reports a loss (:class:`decent.engine.executor.Executor`).

    It is raised once every call made to the other hosts has come back, so their work is
    done; ``partial`` is what they returned where it cannot be asked for again (a phase:
    host → its result). The engine loses the hosts for real (their clients crash, or,
    under ``ray.on_actor_death: restart``, :class:`ActorLost`) and asks a call that only
    reads (evaluation, checkpoint, a joiner's bootstrap) again of the survivors."""

    def __init__(self, hosts: list[int], partial: Any = None) -> None:
        self.hosts = sorted(hosts)
        self.partial = partial
        super().__init__(f"hosts {self.hosts} were lost")
