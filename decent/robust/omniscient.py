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
``OMNISCIENT = True`` and ``fn(cfg, view: View) -> leaves | None`` (the payload's
floating-point leaves, as ``view.target`` and each of ``view.honest`` hold them).

A payload is read as its floating-point leaves in walk order (tensors, and scalars such
as push-sum's weight), which must have the same shapes in every honest payload of the
destination; integer leaves (indices, seeds) are kept. A compressed payload (a Top-K
selection: its values sit at other coordinates in every payload) is refused in one line.
j with nothing honest around it gets b's payload unchanged.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, ClassVar

import numpy as np
import torch

from decent.core.errors import ConfigError
from decent.core.graph import RoundGraph
from decent.core.messages import Declared, Message, Scalar
from decent.core.schema import at_least, positive
from decent.core.storable import storable
from decent.core.tree import tree_map
from decent.robust.attacks import ATTACKS, AttackConfig

Leaves = list[torch.Tensor]  # a payload's floating-point leaves, in walk order


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

    target: Leaves | None  # T_j
    honest: dict[int, Leaves]  # H_j, by sender
    weights: dict[int, float]  # w_jk of the round graph, every neighbour k of j
    byzantine: frozenset[int]  # the Byzantine neighbours of j
    n: int  # clients in the run
    m: int  # Byzantine clients in the run


def _stack(view: View) -> list[Leaves]:
    return ([view.target] if view.target is not None else []) + list(view.honest.values())


def _alie(cfg: ALIEConfig, view: View) -> Leaves | None:
    models = _stack(view)
    if not models:
        return None
    z = cfg.z if cfg.z is not None else alie_z(view.n, view.m)
    out = []
    for k, like in enumerate(models[0]):
        stacked = torch.stack([p[k].double() for p in models])
        sigma = stacked.std(dim=0) if len(models) > 1 else torch.zeros_like(stacked[0])
        out.append((stacked.mean(dim=0) - z * sigma).to(like.dtype))
    return out


def _ipm(cfg: IPMConfig, view: View) -> Leaves | None:
    models = _stack(view)
    if not models:
        return None
    return [(-cfg.eps * torch.stack([p[k].double() for p in models]).mean(dim=0)
             ).to(like.dtype) for k, like in enumerate(models[0])]


def _dissensus(cfg: DissensusConfig, view: View) -> Leaves | None:
    if view.target is None or not view.honest:
        return None
    byz_weight = sum(view.weights[b] for b in view.byzantine)
    out = []
    for k, t in enumerate(view.target):
        pull = sum(view.weights[j] * (x[k].double() - t.double())
                   for j, x in view.honest.items())
        out.append((t.double() - cfg.eps * pull / byz_weight).to(t.dtype))
    return out


ATTACKS.register("alie", ALIEConfig, _alie)
ATTACKS.register("ipm", IPMConfig, _ipm)
ATTACKS.register("dissensus", DissensusConfig, _dissensus)


def refused(attack: str, why: str) -> ConfigError:
    return ConfigError("faults.attack.name", f"{attack} reads the honest payloads of each "
                       f"phase, and {why}: use a non-omniscient attack (sign_flip, scale, "
                       "gaussian, ...)")


def float_leaves(payload: Any, attack: str) -> Leaves:
    """``payload``'s floating-point leaves in walk order (a scalar as a 0-d tensor)."""
    found: Leaves = []

    def visit(leaf: Any) -> Any:
        if isinstance(leaf, Declared):
            raise refused(attack, "this method's payloads are compressed (the values of "
                          "one sit at other coordinates than another's)")
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point():
            found.append(leaf)
        elif isinstance(leaf, np.ndarray) and np.issubdtype(leaf.dtype, np.floating):
            found.append(torch.from_numpy(leaf))
        elif isinstance(leaf, Scalar):
            found.append(torch.tensor(leaf.value, dtype=torch.float32))
        return leaf

    tree_map(visit, payload)
    return found


def with_leaves(payload: Any, leaves: Leaves) -> Any:
    """``payload`` with its floating-point leaves replaced, in walk order, by ``leaves``."""
    it = iter(leaves)

    def put(leaf: Any) -> Any:
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point():
            return next(it).to(leaf.device, leaf.dtype)
        if isinstance(leaf, np.ndarray) and np.issubdtype(leaf.dtype, np.floating):
            return next(it).numpy().astype(leaf.dtype)
        if isinstance(leaf, Scalar):
            return Scalar(float(next(it)))
        return leaf

    return tree_map(put, payload)


def same_shapes(attack: str, payloads: list[Leaves]) -> None:
    shapes = {tuple(t.shape for t in p) for p in payloads}
    if len(shapes) > 1:
        raise refused(attack, "the payloads one client receives differ in shape")


def incoming_weights(graph: RoundGraph, j: int) -> dict[int, float]:
    """The weight j gives each client it hears from (and itself): its row of the mixing
    matrix, undirected; on a directed graph the share each in-neighbour k pushes to j."""
    if not graph.directed:
        return graph.weights[j]
    return {j: graph.weights[j][j], **{k: graph.weights[k][j] for k in graph.in_neighbors[j]}}


def rewrite(cfg: AttackConfig, messages: list[Message], byzantine: frozenset[int],
            graph: RoundGraph, n: int) -> list[Message]:
    """The Byzantine messages of one phase's ``messages`` (payloads readable), each with
    the payload the attack makes from what it sees in the round's ``graph``. The other
    messages are not touched; those returned are new."""
    attack: Callable[[Any, View], Leaves | None] = ATTACKS.entry(
        cfg.name, "faults.attack").build
    by_dst: dict[int, dict[int, Leaves]] = {}
    first: dict[int, dict[int, Leaves]] = {}  # src → dst → payload
    for msg in messages:
        if msg.src not in byzantine:
            payload = float_leaves(msg.payload, cfg.name)
            by_dst.setdefault(msg.dst, {}).setdefault(msg.src, payload)
            first.setdefault(msg.src, {}).setdefault(msg.dst, payload)
    out = []
    for msg in messages:
        if msg.src not in byzantine:
            continue
        j = msg.dst
        sent = first.get(j, {})
        target = sent.get(msg.src, next(iter(sent.values()), None))
        weights = incoming_weights(graph, j)
        view = View(target, dict(sorted(by_dst.get(j, {}).items())), weights,
                    frozenset(k for k in weights if k in byzantine and k != j),
                    n, len(byzantine))
        same_shapes(cfg.name, [float_leaves(msg.payload, cfg.name), *_stack(view)])
        made = attack(cfg, view)
        out.append(msg if made is None else dataclasses.replace(
            msg, payload=with_leaves(msg.payload, made)))
    return out


def check_omniscient(cfg: Any) -> None:
    """An omniscient attack reads the honest payloads of each phase as values of one
    shape: a compressed run's are not (a Top-K selection sits at other coordinates in
    each), so it is refused here, in one line."""
    compression = getattr(cfg.strategy, "compression", None)
    if cfg.faults.attack.OMNISCIENT and cfg.faults.byzantine and \
            getattr(compression, "name", "identity") != "identity":
        raise ConfigError("faults.attack.name", f"{cfg.faults.attack.name} reads the honest "
                          "payloads of each phase, and this run's are compressed "
                          f"(strategy.compression: {compression.name}; the values of one sit "
                          "at other coordinates than another's): use a non-omniscient attack, "
                          "or compression identity")
