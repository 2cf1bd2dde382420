"""Byzantine attacks: what a lying client does to the payloads it sends.

An attack transforms a message's payload on its way out of a Byzantine client, after the
strategy has produced it honestly, so every strategy meets the same attacks and none has
to know about them. Only floating-point values are touched (tensors of a float dtype and
:class:`~decent.core.messages.Scalar` coefficients): integer arrays — Top-K indices, INT8
codes, seeds — are kept, so the payload still decodes and its wire size is unchanged.

* ``sign_flip`` — x → −x (Damaskinos et al.'s and many robust-aggregation papers'
  reversed-gradient attack, applied to whatever the method sends);
* ``scale`` — x → factor·x;
* ``gaussian`` — x → x + N(0, std²);
* ``random`` — x → N(0, std²): a payload of noise in the right shape;
* ``replay`` — the payload this client sent to the same neighbour at the same phase
  ``lag`` rounds earlier (the current one until it has such a history): stale values;
* ``forge`` — x → −x on the way out, after the client has committed to x: against a
  method that commits before it sends (DSO), a payload that does not match its
  commitment; against any other method the same as ``sign_flip``.

The other attacks are in what a committing client commits to (``PhaseContext.tamper``), so
its commitment verifies and only robust aggregation can defend against them.

The noise of one message is drawn from a generator seeded by (fault seed, round, phase,
source, destination, sequence number), so an attack is the same on every backend.

Attacks are registered in :data:`ATTACKS`: a config class (an :class:`AttackConfig`
subclass declaring the attack's own fields, :func:`~decent.core.storable.storable`: a
Byzantine client's attack is in its checkpointed state) and a transform
``fn(attack, payload, out: Outgoing) -> payload``. A user's module (``imports:``) adds one
the same way; :func:`map_floats` applies a function to a payload's float values.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

import numpy as np
import torch

from decent.core.messages import PAYLOAD_NODES, Scalar
from decent.core.registry import Registry
from decent.core.schema import at_least, number, text
from decent.core.storable import storable
from decent.core.tree import tree_map


@storable
@dataclass
class AttackConfig:
    """An attack without parameters of its own (``sign_flip``, ``forge``)."""

    # payloads made from the honest ones of the phase, once every client ran it
    # (decent.robust.omniscient) rather than from the client's own as it leaves
    OMNISCIENT: ClassVar[bool] = False

    # sign_flip, scale (× factor), gaussian / random noise (std), replay an old payload
    # (lag), forge a payload; omniscient: alie, ipm, dissensus; or one a module of
    # `imports` registers
    name: str = text("sign_flip", nullable=False)


@storable
@dataclass
class ScaleConfig(AttackConfig):
    name: str = "scale"
    factor: float = number(-4.0)  # x → factor·x


@storable
@dataclass
class NoiseConfig(AttackConfig):
    """``gaussian`` (x + noise) and ``random`` (noise alone)."""

    name: str = "gaussian"
    std: float = at_least(0, 1.0)  # the noise's standard deviation


@storable
@dataclass
class ReplayConfig(AttackConfig):
    name: str = "replay"
    lag: int = at_least(1, 1)  # rounds back


@dataclass(frozen=True)
class Outgoing:
    """Where an attacked payload goes: its destination, phase step and sequence number,
    and the words that seed its noise."""

    dst: int
    step: int
    seq: int
    seed_words: list[int]

    def generator(self) -> torch.Generator:
        """The message's own generator: the same noise on every backend."""
        return torch.Generator().manual_seed(
            int(np.random.SeedSequence(self.seed_words).generate_state(1, np.uint64)[0] >> 1))


def _float_leaf(fn: Callable[[torch.Tensor], torch.Tensor], leaf: Any) -> Any:
    """``fn`` applied to ``leaf`` when it holds floating-point values; other leaves kept."""
    if isinstance(leaf, torch.Tensor):
        return fn(leaf) if leaf.is_floating_point() else leaf
    if isinstance(leaf, np.ndarray):
        if np.issubdtype(leaf.dtype, np.floating):
            return fn(torch.from_numpy(leaf)).numpy()
        return leaf
    return Scalar(float(fn(torch.tensor(leaf.value, dtype=torch.float32))))


def map_floats(payload: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """``payload`` with ``fn`` applied to each floating-point leaf (tensor or float), also
    inside a compressed payload (``PAYLOAD_NODES``: its stated size is kept)."""
    return tree_map(partial(_float_leaf, fn), payload,
                    leaf=(torch.Tensor, np.ndarray, Scalar), nodes=PAYLOAD_NODES)


def _noise(like: torch.Tensor, std: float, generator: torch.Generator) -> torch.Tensor:
    z = torch.randn(like.shape, generator=generator, dtype=torch.float32)
    return (std * z).to(like.device, like.dtype)


@storable(fields=('cfg', '_sent'))
class Attack:
    """One Byzantine client's attack (it keeps the client's send history for replay)."""

    def __init__(self, cfg: AttackConfig) -> None:
        self.cfg = cfg
        # (phase step, dst, seq) → its payloads of the last lag + 1 rounds
        self._sent: dict[tuple[int, int, int], deque[Any]] = {}

    def __call__(self, payload: Any, dst: int, step: int, seq: int,
                 seed_words: list[int]) -> Any:
        transform = ATTACKS.entry(self.cfg.name, "faults.attack").build
        return transform(self, payload, Outgoing(dst, step, seq, seed_words))

    def replayed(self, payload: Any, out: Outgoing, lag: int) -> Any:
        """The payload sent to the same destination at the same phase ``lag`` rounds
        before (``payload`` itself until there is one); remembers ``payload``."""
        history = self._sent.setdefault((out.step, out.dst, out.seq), deque(maxlen=lag + 1))
        history.append(copy.deepcopy(payload))
        return history[0] if len(history) == lag + 1 else payload


def _negate(attack: Attack, payload: Any, out: Outgoing) -> Any:
    return map_floats(payload, lambda t: -t)


def _scale(attack: Attack, payload: Any, out: Outgoing) -> Any:
    return map_floats(payload, lambda t: attack.cfg.factor * t)


def _gaussian(attack: Attack, payload: Any, out: Outgoing) -> Any:
    generator = out.generator()
    return map_floats(payload, lambda t: t + _noise(t, attack.cfg.std, generator))


def _random(attack: Attack, payload: Any, out: Outgoing) -> Any:
    generator = out.generator()
    return map_floats(payload, lambda t: _noise(t, attack.cfg.std, generator))


def _replay(attack: Attack, payload: Any, out: Outgoing) -> Any:
    return attack.replayed(payload, out, attack.cfg.lag)


ATTACKS = Registry("attack")
ATTACKS.register("sign_flip", AttackConfig, _negate)
# forge: the client commits honestly (engine/group.py) and negates on the way out
ATTACKS.register("forge", AttackConfig, _negate)
ATTACKS.register("scale", ScaleConfig, _scale)
ATTACKS.register("gaussian", NoiseConfig, _gaussian)
ATTACKS.register("random", NoiseConfig, _random)
ATTACKS.register("replay", ReplayConfig, _replay)
