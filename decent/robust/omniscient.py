"""Omniscient attacks: Byzantine payloads made from the honest payloads of the same phase.

The attacks of :mod:`decent.robust.attacks` transform a Byzantine client's own payload.
The strongest known attacks on robust rules read what the honest clients send: they are
applied once every client has run the phase, before the messages are routed (the engine
loop, on every backend: the platform simulates the attacker's knowledge; no strategy
sees it). A Byzantine client b sending to client j uses, as the authors' decentralized
code does (epfml/byzantine-robust-decentralized-optimizer, ``codes/attacks.py``: the
target's model and its good neighbours' models):

* T_j — what j itself sent this phase (its message to b, else its first), if j is honest;
* H_j — what j's honest neighbours sent j this phase;

and replaces its payload to j by

* ``alie`` — μ − z·σ per coordinate over {T_j} ∪ H_j (Baruch, Baruch & Goldberg, 2019,
  "A Little Is Enough"; σ with Bessel's correction, as ``torch.std``), z = ``z`` or the
  paper's z_max = Φ⁻¹((n − m − s)/(n − m)), s = ⌊n/2 + 1⌋ − m, for n clients of which m
  Byzantine;
* ``ipm`` — −ε · mean({T_j} ∪ H_j) (Xie, Koyejo & Gupta, 2020, inner-product
  manipulation);
* ``dissensus`` — T_j − ε · Σ_{k ∈ H} w_jk (x_k − T_j) / Σ_{b' Byzantine} w_jb' (He,
  Karimireddy & Jaggi, 2022): the Byzantine neighbours of j together cancel, and for
  ε > 1 reverse, the pull of j's honest neighbours, keeping the clients apart.

A user's module registers an omniscient attack the same way: a config class with
``OMNISCIENT = True`` and ``fn(cfg, view: View) -> payload | None``.

Payloads must be named tensors (``dict[str, Tensor]``, what DSGD, DZSGD, GASLoC and an
uncompressed FedAvg send); j with nothing honest around it gets b's payload unchanged.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, ClassVar

import torch

from decent.core.errors import ConfigError
from decent.core.messages import Message
from decent.core.schema import at_least, positive
from decent.core.storable import storable
from decent.robust.attacks import ATTACKS, AttackConfig

Tensors = dict[str, torch.Tensor]


@storable
@dataclass
class ALIEConfig(AttackConfig):
    OMNISCIENT: ClassVar[bool] = True
    name: str = "alie"
    # z: how many standard deviations below the mean; None: the paper's z_max from the
    # number of clients and of Byzantine ones (the ClippedGossip authors' experiments: 10)
    z: float | None = at_least(0, None, nullable=True)


@storable
@dataclass
class IPMConfig(AttackConfig):
    OMNISCIENT: ClassVar[bool] = True
    name: str = "ipm"
    eps: float = positive(0.1)  # ε: the payload is −ε · the honest mean (the authors' 0.1)


@storable
@dataclass
class DissensusConfig(AttackConfig):
    OMNISCIENT: ClassVar[bool] = True
    name: str = "dissensus"
    eps: float = positive(1.5)  # ε: > 1 reverses the honest pull (the authors' 1.5)


def alie_z(n: int, m: int) -> float:
    """The paper's z_max for n clients of which m are Byzantine (0: no room to hide)."""
    s = math.floor(n / 2 + 1) - m
    share = (n - m - s) / (n - m)
    return NormalDist().inv_cdf(share) if 0 < share < 1 else 0.0


@dataclass(frozen=True)
class View:
    """What a Byzantine sender knows about its destination j this phase."""

    target: Tensors | None  # T_j
    honest: dict[int, Tensors]  # H_j, by sender
    weights: dict[int, float]  # w_jk of the round graph, every neighbour k of j
    byzantine: frozenset[int]  # the Byzantine neighbours of j
    n: int  # clients in the run
    m: int  # Byzantine clients in the run


def _stack(view: View) -> list[Tensors]:
    return ([view.target] if view.target is not None else []) + list(view.honest.values())


def _alie(cfg: ALIEConfig, view: View) -> Tensors | None:
    models = _stack(view)
    if not models:
        return None
    z = cfg.z if cfg.z is not None else alie_z(view.n, view.m)
    out = {}
    for name, like in models[0].items():
        stacked = torch.stack([p[name].double() for p in models])
        sigma = stacked.std(dim=0) if len(models) > 1 else torch.zeros_like(stacked[0])
        out[name] = (stacked.mean(dim=0) - z * sigma).to(like.dtype)
    return out


def _ipm(cfg: IPMConfig, view: View) -> Tensors | None:
    models = _stack(view)
    if not models:
        return None
    return {name: (-cfg.eps * torch.stack([p[name].double() for p in models]).mean(dim=0)
                   ).to(like.dtype) for name, like in models[0].items()}


def _dissensus(cfg: DissensusConfig, view: View) -> Tensors | None:
    if view.target is None or not view.honest:
        return None
    byz_weight = sum(view.weights[b] for b in view.byzantine)
    out = {}
    for name, t in view.target.items():
        pull = sum(view.weights[k] * (x[name].double() - t.double())
                   for k, x in view.honest.items())
        out[name] = (t.double() - cfg.eps * pull / byz_weight).to(t.dtype)
    return out


ATTACKS.register("alie", ALIEConfig, _alie)
ATTACKS.register("ipm", IPMConfig, _ipm)
ATTACKS.register("dissensus", DissensusConfig, _dissensus)


def named_tensors(payload: Any, attack: str) -> Tensors:
    if isinstance(payload, dict) and all(isinstance(v, torch.Tensor) for v in payload.values()):
        return payload
    raise ConfigError("faults.attack.name", f"{attack} reads the honest payloads as named "
                      f"tensors; this method sends {type(payload).__name__} payloads: use a "
                      "non-omniscient attack (sign_flip, scale, gaussian, ...)")


def rewrite(cfg: AttackConfig, messages: list[Message], byzantine: frozenset[int],
            weights: dict[int, dict[int, float]], n: int) -> list[Message]:
    """The Byzantine messages of one phase's ``messages`` (payloads readable), each with
    the payload the attack makes from what it sees; ``weights``: the round graph's. The
    other messages are not touched; those returned are new."""
    attack: Callable[[Any, View], Tensors | None] = ATTACKS.entry(
        cfg.name, "faults.attack").build
    by_dst: dict[int, dict[int, Tensors]] = {}
    first: dict[int, dict[int, Tensors]] = {}  # src → dst → payload
    for msg in messages:
        if msg.src not in byzantine:
            payload = named_tensors(msg.payload, cfg.name)
            by_dst.setdefault(msg.dst, {}).setdefault(msg.src, payload)
            first.setdefault(msg.src, {}).setdefault(msg.dst, payload)
    out = []
    for msg in messages:
        if msg.src not in byzantine:
            continue
        j = msg.dst
        sent = first.get(j, {})
        target = sent.get(msg.src, next(iter(sent.values()), None))
        view = View(target, dict(sorted(by_dst.get(j, {}).items())), weights[j],
                    frozenset(k for k in weights[j] if k in byzantine and k != j),
                    n, len(byzantine))
        made = attack(cfg, view)
        out.append(msg if made is None else dataclasses.replace(msg, payload=made))
    return out
