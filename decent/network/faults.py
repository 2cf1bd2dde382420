"""Faults injected into a run: lost, late and cut-off messages on the wire, and Byzantine
clients whose outgoing payloads are attacked (:mod:`decent.robust.attacks`).

Faults live in the router and around a client's outbox, never inside a strategy, so every
method meets the same ones. Each decision about a message is a function of (fault seed,
round, phase, source, destination, sequence number) only, so it does not depend on the
order in which actors post, and a run is the same on both backends:

* ``drop`` — each message is lost with this probability (its bytes were sent);
* ``delay`` / ``delay_phases`` — each message that is not lost arrives ``delay_phases``
  phases late with probability ``delay`` (into a later round if need be);
* ``partition`` — during rounds [start, start + rounds) the clients split into ``parts``
  contiguous blocks of ids and no message crosses between blocks (it is refused at the
  sender: not sent, not counted in bytes);
* ``byzantine`` (a list of client ids) or ``byzantine_fraction`` (that share of the
  clients holding data, drawn with the fault seed) — the clients whose payloads
  ``attack`` transforms.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from decent.core.errors import ConfigError
from decent.core.registry import component
from decent.core.schema import at_least, in_range
from decent.robust.attacks import ATTACKS, AttackConfig

WIRE_SALT, BYZANTINE_SALT, ATTACK_SALT = 0x77, 0x62, 0x61


@dataclass
class PartitionConfig:
    start: int = at_least(0, 0)  # first round cut
    rounds: int = at_least(0, 0)  # how many rounds; 0 = no partition
    parts: int = at_least(2, 2)  # contiguous blocks of client ids


@dataclass
class FaultsConfig:
    seed: int | None = in_range(None, 0, 2**63 - 1, nullable=True)  # None: the run seed
    drop: float = in_range(0.0, 0.0, 1.0)  # probability that a message is lost
    # probability that a message arrives delay_phases phases late
    delay: float = in_range(0.0, 0.0, 1.0)
    delay_phases: int = at_least(1, 1)  # how many phases a delayed message is held back
    # a network partition: the clients split into blocks that cannot talk
    partition: PartitionConfig = field(default_factory=PartitionConfig)
    # ids of Byzantine clients, which send attack payloads
    byzantine: list[int] = at_least(0, [], each=True)
    # or: this fraction of the workers is Byzantine, chosen with the faults seed
    byzantine_fraction: float = in_range(0.0, 0.0, 1.0, hi_open=True)
    # what Byzantine clients send instead of their honest payload: {name: ..., and that
    # attack's own fields} (`decent config schema attack` lists them)
    attack: Any = field(default_factory=AttackConfig, metadata=component(ATTACKS))

    def validate(self, prefix: str) -> None:
        if self.byzantine and self.byzantine_fraction > 0:
            raise ConfigError(f"{prefix}.byzantine", "give either a list of clients or "
                              "byzantine_fraction, not both")
        if len(set(self.byzantine)) != len(self.byzantine):
            raise ConfigError(f"{prefix}.byzantine", f"lists a client twice: {self.byzantine}")

    @property
    def on_the_wire(self) -> bool:
        return self.drop > 0 or self.delay > 0 or self.partition.rounds > 0


def fault_seed(cfg: FaultsConfig, run_seed: int) -> int:
    return run_seed if cfg.seed is None else cfg.seed


def byzantine_clients(cfg: FaultsConfig, run_seed: int, holders: list[int]) -> list[int]:
    """The Byzantine clients, sorted: the listed ones, or round(fraction·|holders|) of the
    data holders drawn with the fault seed."""
    if cfg.byzantine:
        return sorted(cfg.byzantine)
    k = round(cfg.byzantine_fraction * len(holders))
    if k == 0:
        return []
    rng = np.random.default_rng([fault_seed(cfg, run_seed), BYZANTINE_SALT])
    return sorted(int(c) for c in rng.choice(holders, size=k, replace=False))


class WireFaults:
    """What happens to each message on the wire."""

    def __init__(self, cfg: FaultsConfig, n: int, run_seed: int) -> None:
        self.cfg = cfg
        self.n = n
        self.seed = fault_seed(cfg, run_seed)

    def cut(self, round_: int, src: int, dst: int) -> bool:
        """True if a partition separates src from dst in this round."""
        p = self.cfg.partition
        if not p.start <= round_ < p.start + p.rounds:
            return False
        return src * p.parts // self.n != dst * p.parts // self.n

    def fate(self, round_: int, step: int, src: int, dst: int, seq: int) -> tuple[bool, int]:
        """(lost?, extra phases of delay) of one message."""
        cfg = self.cfg
        if cfg.drop == 0 and cfg.delay == 0:
            return False, 0
        u_drop, u_delay = np.random.default_rng(
            [self.seed, WIRE_SALT, round_, step, src, dst, seq]).random(2)
        if u_drop < cfg.drop:
            return True, 0
        return False, cfg.delay_phases if u_delay < cfg.delay else 0
