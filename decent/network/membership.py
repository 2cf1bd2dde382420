"""Who takes part in each round: clients that leave, crash and join.

A client is *present* in a round when it runs that round's phases. Departures and
arrivals happen at round boundaries, from a schedule (``churn.events``), from per-round
rates (``churn.leave_rate`` for present clients, ``churn.join_rate`` for absent ones,
seeded), or — on Ray — because the process hosting a client died (:meth:`crash`).

* **leave** — graceful: the client announces it, so from its last round on the others
  know (``PhaseContext.alive`` no longer lists it);
* **crash** — silent: the client stops, but for the round in which it stopped the others
  still believe it alive (their messages to it come back undeliverable); from the next
  round on it is known gone;
* **join** — the client (absent from the start, ``churn.absent``, or gone earlier) comes
  back, starting from the mean of its present neighbours' models.

The whole schedule follows from the config and the seed, so a run can be checked before
it starts (a method that cannot take churn is refused then), and every process agrees.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from decent.core.errors import ConfigError
from decent.core.schema import CHECK, Check, at_least, in_range, one_of, validate_fields

CHURN_KINDS = ("leave", "crash", "join")
CHURN_SALT = 0x6368


@dataclass
class ChurnEvent:
    round: int = at_least(0, 1)  # the event takes effect at the start of this round
    client: int = at_least(0, 0)
    kind: str = one_of(CHURN_KINDS, "leave")


@dataclass
class ChurnConfig:
    # e.g. [{round: 5, client: 3, kind: crash}, {round: 9, client: 3, kind: join}]
    events: list[ChurnEvent] = dataclasses.field(default_factory=list,
                                                 metadata={CHECK: Check()})
    absent: list[int] = at_least(0, [], each=True)  # clients that join later
    leave_rate: float = in_range(0.0, 0.0, 1.0, hi_open=True)  # per present client, round
    join_rate: float = in_range(0.0, 0.0, 1.0)  # per absent client, per round
    seed: int | None = in_range(None, 0, 2**63 - 1, nullable=True)  # None: the run seed

    def validate(self, prefix: str) -> None:
        for k, event in enumerate(self.events):
            validate_fields(event, f"{prefix}.events[{k}]")

    @property
    def active(self) -> bool:
        return bool(self.events or self.absent or self.leave_rate or self.join_rate)


@dataclass(frozen=True)
class RoundMembers:
    present: frozenset[int]  # run this round's phases
    known: frozenset[int]  # what the clients believe: present + this round's crashes
    joined: tuple[int, ...]  # arrived at the start of this round (to bootstrap)
    departed: tuple[tuple[int, str], ...]  # (client, "leave" | "crash") at this round


@dataclass
class Membership:
    """The rounds' members, computed once from the config (and extended by real crashes)."""

    n: int
    rounds: list[RoundMembers] = field(default_factory=list)

    @classmethod
    def plan(cls, cfg: ChurnConfig, n: int, rounds: int, run_seed: int) -> Membership:
        for k, e in enumerate(cfg.events):
            if e.client >= n:
                raise ConfigError(f"churn.events[{k}].client", f"client {e.client} does not "
                                  f"exist (ids are 0..{n - 1})")
        bad = [c for c in cfg.absent if c >= n]
        if bad:
            raise ConfigError("churn.absent", f"client {bad[0]} does not exist (ids are "
                              f"0..{n - 1})")
        seed = run_seed if cfg.seed is None else cfg.seed
        present = set(range(n)) - set(cfg.absent)
        if not present:
            raise ConfigError("churn.absent", "every client is absent at the start")
        out = []
        for r in range(rounds):
            joined, departed = [], []
            if r > 0 and (cfg.leave_rate or cfg.join_rate):
                draws = np.random.default_rng([seed, CHURN_SALT, r]).random(n)
                for c in range(n):
                    if c in present and draws[c] < cfg.leave_rate:
                        departed.append((c, "leave"))
                    elif c not in present and draws[c] < cfg.join_rate:
                        joined.append(c)
            for k, e in enumerate(cfg.events):
                if e.round != r:
                    continue
                if e.kind == "join":
                    if e.client in present and e.client not in {d for d, _ in departed}:
                        raise ConfigError(f"churn.events[{k}]", f"client {e.client} joins at "
                                          f"round {r} but is present then")
                    joined.append(e.client)
                else:
                    if e.client not in present:
                        raise ConfigError(f"churn.events[{k}]", f"client {e.client} "
                                          f"{e.kind}s at round {r} but is not present then")
                    departed.append((e.client, e.kind))
            gone = {c for c, _ in departed}
            present = (present - gone) | set(joined)
            if not present:
                raise ConfigError("churn", f"no client is left at round {r}; lower "
                                  "churn.leave_rate or schedule fewer departures")
            crashed = {c for c, kind in departed if kind == "crash"}
            out.append(RoundMembers(frozenset(present), frozenset(present | crashed),
                                    tuple(sorted(set(joined))), tuple(sorted(departed))))
        return cls(n, out)

    def at(self, round_: int) -> RoundMembers:
        return self.rounds[round_]

    def crash(self, clients: set[int], round_: int) -> None:
        """Clients lost for real (their process died) during ``round_``: gone from the
        next round on, for good."""
        for r in range(round_ + 1, len(self.rounds)):
            m = self.rounds[r]
            self.rounds[r] = RoundMembers(m.present - clients, m.known - clients,
                                          tuple(c for c in m.joined if c not in clients),
                                          m.departed)
