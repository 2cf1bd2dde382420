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
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import torch

from decent.core.messages import PAYLOAD_NODES, Scalar
from decent.core.schema import at_least, number, one_of
from decent.core.storable import storable
from decent.core.tree import tree_map

ATTACKS = ("sign_flip", "scale", "gaussian", "random", "replay", "forge")


@storable
@dataclass
class AttackConfig:
    # sign_flip, scale (× factor), gaussian / random noise (std), replay an old payload (lag), forge
    # a payload
    name: str = one_of(ATTACKS, "sign_flip")
    factor: float = number(-4.0)  # ``scale``
    std: float = at_least(0, 1.0)  # ``gaussian`` and ``random``
    lag: int = at_least(1, 1)  # ``replay``: rounds back


def _float_leaf(fn: Callable[[torch.Tensor], torch.Tensor], leaf: Any) -> Any:
    """``fn`` applied to ``leaf`` when it holds floating-point values; other leaves kept."""
    if isinstance(leaf, torch.Tensor):
        return fn(leaf) if leaf.is_floating_point() else leaf
    if isinstance(leaf, np.ndarray):
        if np.issubdtype(leaf.dtype, np.floating):
            return fn(torch.from_numpy(leaf)).numpy()
        return leaf
    return Scalar(float(fn(torch.tensor(leaf.value, dtype=torch.float32))))


def _map_floats(payload: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
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
        cfg = self.cfg
        if cfg.name == "replay":
            history = self._sent.setdefault((step, dst, seq), deque(maxlen=cfg.lag + 1))
            history.append(copy.deepcopy(payload))
            return history[0] if len(history) == cfg.lag + 1 else payload
        if cfg.name in ("sign_flip", "forge"):
            return _map_floats(payload, lambda t: -t)
        if cfg.name == "scale":
            return _map_floats(payload, lambda t: cfg.factor * t)
        generator = torch.Generator().manual_seed(
            int(np.random.SeedSequence(seed_words).generate_state(1, np.uint64)[0] >> 1))
        if cfg.name == "gaussian":
            return _map_floats(payload, lambda t: t + _noise(t, cfg.std, generator))
        return _map_floats(payload, lambda t: _noise(t, cfg.std, generator))
