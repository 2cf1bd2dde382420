"""ZO estimators as a replica-level interface: what a seed-based strategy (SeedFlood) needs
of a model — estimate α for a seed, apply a list of (seed, coefficient) updates, expose the
replica's private state — whichever estimator is behind it.

* :class:`DenseMeZO` — z over every trainable tensor; applying a message regenerates a
  d-entry Gaussian (O(d) per message); every client holds its own full parameters.
* :class:`SubCGE` — z in a shared rank-r subspace for every Linear weight, plus dense z on
  the 1-D tensors. The big weights W are frozen and shared by every client of a process
  (one copy per actor); each client privately holds only its r×r buffers A (one per
  layer) and its 1-D tensors. Applying a message is O(#layers + d_1D).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn

from decent.models import params
from decent.zo import mezo, subcge

Update = tuple[int, float]  # (seed, coefficient c): θ ← θ − c·z(seed)


class DenseMeZO:
    def prepare_base(self, model: nn.Module) -> None:
        pass

    def init_replica(self, model: nn.Module) -> None:
        pass

    def estimate(self, model: nn.Module, loss_fn: Callable[[], float], seed: int,
                 eps: float) -> float:
        # Restore θ exactly from a copy rather than by MeZO's in-place −ε: the rounding
        # residue would differ between clients (each perturbs with its own seed) and break
        # the bit-for-bit consensus of flooding. One transient copy per process.
        tensors = list(params.trainable_params(model).values())
        saved = [t.detach().clone() for t in tensors]
        alpha = mezo.two_point(tensors, loss_fn, seed, eps)
        with torch.no_grad():
            for t, s in zip(tensors, saved, strict=True):
                t.copy_(s)
        return alpha

    def apply(self, model: nn.Module, updates: Sequence[Update]) -> None:
        mezo.apply_updates(list(params.trainable_params(model).values()), updates)

    def state_vector(self, model: nn.Module) -> np.ndarray:
        return params.flat_vector(model)

    def load_state_vector(self, model: nn.Module, vector: np.ndarray) -> None:
        params.load_flat(model, vector)

    def refresh(self, models: Sequence[nn.Module], seed: int,
                history: Sequence[Sequence[Update]]) -> None:
        pass


class SubCGE:
    """One instance per process: holds the shared basis (U, V) and the shared weights."""

    ATTR = "_decent_subcge"  # where a replica keeps its SubCGEState and 1-D tensors

    def __init__(self, rank: int, seed: int) -> None:
        self.rank = rank
        self.seed = seed
        self.basis: subcge.SubspaceBasis | None = None

    def prepare_base(self, model: nn.Module) -> None:
        """Freeze every tensor, so all replicas made from ``model`` share them; the 1-D
        tensors are then made private per replica in :meth:`init_replica`."""
        model.requires_grad_(False)
        self.basis = subcge.SubspaceBasis(model, self.rank, self.seed)

    def _state(self, model: nn.Module) -> tuple[subcge.SubCGEState, list[torch.Tensor]]:
        if not hasattr(model, self.ATTR):
            self.init_replica(model)
        return getattr(model, self.ATTR)

    def init_replica(self, model: nn.Module) -> None:
        """Private 1-D tensors and a zero A for a replica (its big weights stay shared)."""
        assert self.basis is not None
        for name, p in subcge.one_d_tensors(model):
            owner, _, attr = name.rpartition(".")
            module = model.get_submodule(owner) if owner else model
            setattr(module, attr, nn.Parameter(p.detach().clone(), requires_grad=False))
        # a replica made by deepcopy carries its origin's hooks: start from none
        for name in self.basis.names:
            model.get_submodule(name)._forward_hooks.clear()
        L, r = self.basis.num_layers, self.basis.rank
        state = subcge.SubCGEState(torch.zeros(L, r, r, device=self.basis.U[0].device))
        subcge.attach(model, self.basis, state)
        one_d = [p for _, p in subcge.one_d_tensors(model)]
        object.__setattr__(model, self.ATTR, (state, one_d))

    def estimate(self, model: nn.Module, loss_fn: Callable[[], float], seed: int,
                 eps: float) -> float:
        state, one_d = self._state(model)
        assert self.basis is not None
        return subcge.two_point(model, self.basis, state, one_d, loss_fn, seed, eps)

    def apply(self, model: nn.Module, updates: Sequence[Update]) -> None:
        state, one_d = self._state(model)
        subcge.apply_messages(state, one_d, updates)

    def state_vector(self, model: nn.Module) -> np.ndarray:
        state, one_d = self._state(model)
        parts = [state.A.reshape(-1), *(t.reshape(-1) for t in one_d)]
        return torch.cat([p.detach().to("cpu", torch.float64) for p in parts]).numpy()

    @torch.no_grad()
    def load_state_vector(self, model: nn.Module, vector: np.ndarray) -> None:
        state, one_d = self._state(model)
        offset = 0
        for t in (state.A, *one_d):
            chunk = torch.tensor(vector[offset: offset + t.numel()])
            t.copy_(chunk.reshape(t.shape).to(t.dtype))
            offset += t.numel()

    @torch.no_grad()
    def refresh(self, models: Sequence[nn.Module], seed: int,
                history: Sequence[Sequence[Update]]) -> None:
        """Fold U A Vᵀ into the shared W, zero every replica's A, draw a new subspace.

        ``history`` holds every update since the last refresh, one list per iteration
        (sorted by seed). After a drain every replica has applied exactly these, so A is
        rebuilt from them in that canonical order rather than taken from one replica:
        under delayed flooding replicas applied them in different batches, which changes
        the float rounding, and the folded W must not depend on how clients are grouped
        into processes."""
        assert self.basis is not None
        L, r = self.basis.num_layers, self.basis.rank
        canonical = subcge.SubCGEState(torch.zeros(L, r, r, device=self.basis.U[0].device))
        for updates in history:
            subcge.apply_messages(canonical, [], updates)
        self.basis.fold(models[0], canonical.A)  # W is shared by the process's replicas
        for model in models:
            self._state(model)[0].A.zero_()
        self.basis.rebuild(seed)
