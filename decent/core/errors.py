"""Errors a user can cause: one clear line naming the field and the fix."""

from __future__ import annotations


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

    This is a bug in strategy code, not a user error, so it is raised loudly.
    """


class ActorLost(RuntimeError):
    """A process hosting clients died, and the run asked to restart from its last
    checkpoint rather than go on without them (``ray.on_actor_death: restart``)."""
