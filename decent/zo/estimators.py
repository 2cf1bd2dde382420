"""ZO estimators as a replica-level interface: what a seed-based strategy (SeedFlood) needs
of a model — estimate α for a seed, apply a list of (seed, coefficient) updates, expose the
replica's private state — whichever estimator is behind it.

An estimator is made once per process (:meth:`prepare_base` on the initial model, before
the clients' replicas are copied from it); each replica then gets its own state from
:meth:`init_replica`, which the caller keeps (a strategy keeps it in its client state):

* :class:`DenseMeZO` — z over every trainable tensor; applying a message regenerates a
  d-entry Gaussian (O(d) per message); every client holds its own full parameters.
* :class:`SubCGE` — z in a shared rank-r subspace for every Linear weight, plus dense z on
  the 1-D tensors. The big weights W are frozen and shared by every client of a process
  (one copy per actor); each client privately holds only its r×r buffers A (one per
  layer) and its 1-D tensors. Applying a message is O(#layers + d_1D).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from decent.core.storable import storable
from decent.models import params
from decent.zo import mezo, subcge

Update = tuple[int, float]  # (seed, coefficient c): θ ← θ − c·z(seed)


@storable
@dataclass
class DenseReplica:
    """A replica under dense MeZO: its live trainable tensors."""

    tensors: list[torch.Tensor]

    def vector(self) -> np.ndarray:
        return torch.cat([t.detach().reshape(-1).to("cpu", torch.float64)
                          for t in self.tensors]).numpy()

    @torch.no_grad()
    def load_vector(self, vector: np.ndarray) -> None:
        offset = 0
        for t in self.tensors:
            t.copy_(torch.tensor(vector[offset: offset + t.numel()]).reshape(t.shape))
            offset += t.numel()


Replica = DenseReplica | subcge.SubCGEState


def _bits(t: torch.Tensor) -> torch.Tensor:
    """``t``'s bits as integers (equal exactly where the floats are bit-identical: -0.0
    and 0.0 apart, a NaN equal to itself)."""
    kinds = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}
    return t.detach().reshape(-1).view(kinds[t.element_size()])


_LAST_APPLIED: weakref.WeakKeyDictionary[SubCGE, ApplyOnce] = weakref.WeakKeyDictionary()


class ApplyOnce:
    """The last application of a process: the updates, the replica's tensors before and
    after. Under full flooding every replica of a process applies the same sorted updates
    to the same bits; the next replica that does is given the result (copied) instead of
    computing it again: O(replica size) instead of O(messages × (layers + d_1D)). Exact:
    the result of the same operations on the same bits, recognised bit for bit."""

    def __init__(self) -> None:
        self.updates: tuple[Update, ...] | None = None
        self.before: list[torch.Tensor] = []
        self.after: list[torch.Tensor] = []

    @torch.no_grad()
    def __call__(self, tensors: Sequence[torch.Tensor], updates: Sequence[Update],
                 apply: Callable[[], None]) -> None:
        key = tuple(updates)
        if key == self.updates and len(tensors) == len(self.before) and all(
                t.shape == b.shape and t.dtype == b.dtype and torch.equal(_bits(t), _bits(b))
                for t, b in zip(tensors, self.before, strict=True)):
            for t, a in zip(tensors, self.after, strict=True):
                t.copy_(a)
            return
        before = [t.detach().clone() for t in tensors]
        apply()
        self.updates, self.before = key, before
        self.after = [t.detach().clone() for t in tensors]


@storable(fields=())
class DenseMeZO:
    def prepare_base(self, model: nn.Module) -> None:
        pass

    def init_replica(self, model: nn.Module) -> DenseReplica:
        return DenseReplica(list(params.trainable_params(model).values()))

    def estimate(self, model: nn.Module, replica: DenseReplica, loss_fn: Callable[[], float],
                 seed: int, eps: float) -> float:
        # Restore θ exactly from a copy rather than by MeZO's in-place −ε: the rounding
        # residue would differ between clients (each perturbs with its own seed) and break
        # the bit-for-bit consensus of flooding. One transient copy per process.
        saved = [t.detach().clone() for t in replica.tensors]
        alpha = mezo.two_point(replica.tensors, loss_fn, seed, eps)
        with torch.no_grad():
            for t, s in zip(replica.tensors, saved, strict=True):
                t.copy_(s)
        return alpha

    def apply(self, replica: DenseReplica, updates: Sequence[Update]) -> None:
        # (no ApplyOnce: it would hold two copies of the whole model in the process)
        mezo.apply_updates(replica.tensors, updates)

    def refresh(self, models: Sequence[nn.Module], replicas: Sequence[DenseReplica], seed: int,
                history: Sequence[Sequence[Update]]) -> None:
        pass


class InPlaceMeZO(DenseMeZO):
    """MeZO's own step (:func:`decent.zo.mezo.two_point`): θ perturbed in place by +ε,
    −2ε, +ε and so restored only up to float rounding, with no copy held. What the MeZO
    steps of MeZO, DZSGD and seed gossip take (each client owns its whole model, so no
    consensus depends on the residue); kept by no one, hence not storable."""

    def estimate(self, model: nn.Module, replica: DenseReplica, loss_fn: Callable[[], float],
                 seed: int, eps: float) -> float:
        return mezo.two_point(replica.tensors, loss_fn, seed, eps)


@storable(fields=('rank', 'seed', 'layers', 'basis', 'anchor_1d'))
class SubCGE:
    """One instance per process: holds the shared basis (U, V) and the shared weights."""

    def __init__(self, rank: int, seed: int, layers: str = "all_2d") -> None:
        self.rank = rank
        self.seed = seed
        self.layers = layers  # which weights the basis covers (subcge.LAYER_SETS)
        self.basis: subcge.SubspaceBasis | None = None
        # the 1-D tensors every replica held after the last refresh (at first: the
        # initial model's), from which refresh rebuilds them canonically
        self.anchor_1d: list[torch.Tensor] = []

    def prepare_base(self, model: nn.Module) -> None:
        """Freeze every tensor, so all replicas made from ``model`` share them; the 1-D
        tensors are then made private per replica in :meth:`init_replica`."""
        model.requires_grad_(False)
        self.basis = subcge.SubspaceBasis(model, self.rank, self.seed, layers=self.layers)
        self.anchor_1d = [p.detach().clone() for _, p in subcge.one_d_tensors(model)]

    def init_replica(self, model: nn.Module) -> subcge.SubCGEState:
        """Private 1-D tensors and a zero A for a replica (its big weights stay shared)."""
        assert self.basis is not None
        for name, p in subcge.one_d_tensors(model):
            owner, _, attr = name.rpartition(".")
            module = model.get_submodule(owner) if owner else model
            setattr(module, attr, nn.Parameter(p.detach().clone(), requires_grad=False))
        # a replica made by deepcopy carries its origin's hooks: start from none
        for name in self.basis.names:
            model.get_submodule(name)._forward_hooks.clear()
            model.get_submodule(name)._forward_hooks_with_kwargs.clear()
        tied = subcge.tied_head(model, self.basis)
        if tied is not None:
            tied[0]._forward_hooks.clear()
        L, r = self.basis.num_layers, self.basis.rank
        state = subcge.SubCGEState(torch.zeros(L, r, r, device=self.basis.U[0].device),
                                   one_d=[p for _, p in subcge.one_d_tensors(model)])
        subcge.attach(model, self.basis, state)
        return state

    def estimate(self, model: nn.Module, replica: subcge.SubCGEState,
                 loss_fn: Callable[[], float], seed: int, eps: float) -> float:
        assert self.basis is not None
        return subcge.two_point(self.basis, replica, loss_fn, seed, eps)

    def apply(self, replica: subcge.SubCGEState, updates: Sequence[Update]) -> None:
        # the process's last application: transient, kept beside the estimator (a checkpoint
        # stores the estimator's declared fields only)
        once = _LAST_APPLIED.setdefault(self, ApplyOnce())
        once([replica.A, *replica.one_d], updates,
             lambda: subcge.apply_messages(replica, updates))

    @torch.no_grad()
    def refresh(self, models: Sequence[nn.Module], replicas: Sequence[subcge.SubCGEState],
                seed: int, history: Sequence[Sequence[Update]]) -> None:
        """Fold U A Vᵀ into the shared W, zero every replica's A, reset every replica's
        1-D tensors to one canonical value, draw a new subspace.

        ``history`` holds every update since the last refresh, one list per iteration
        (sorted by seed). After a drain every replica has applied exactly these, but under
        delayed flooding in different batches, which changes the float rounding. So A and
        the 1-D tensors are rebuilt from the history in that canonical order (A from zero,
        the 1-D tensors from their value at the last refresh) rather than taken from one
        replica: afterwards every replica, in every process, is bit-for-bit the same, and
        the folded W does not depend on how clients are grouped into processes."""
        assert self.basis is not None
        L, r = self.basis.num_layers, self.basis.rank
        canonical = subcge.SubCGEState(torch.zeros(L, r, r, device=self.basis.U[0].device),
                                       one_d=[t.clone() for t in self.anchor_1d])
        for updates in history:
            subcge.apply_messages(canonical, updates)
        self.basis.fold(models[0], canonical.A)  # W is shared by the process's replicas
        for replica in replicas:
            replica.A.zero_()
            for mine, value in zip(replica.one_d, canonical.one_d, strict=True):
                mine.copy_(value)
        self.anchor_1d = canonical.one_d
        self.basis.rebuild(seed)
