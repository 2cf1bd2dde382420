"""SubCGE: zeroth-order estimates in a shared low-rank subspace (SeedFlood paper, §3.4 and
Appendix A).

Every target weight W_ℓ (out×in, of an ``nn.Linear``) gets ``U_ℓ`` (out×r) and ``V_ℓ``
(in×r) with N(0, 1) entries drawn from the global seed — the same on every client. A
client's model is ``W_ℓ + U_ℓ A_ℓ V_ℓᵀ`` with a private r×r buffer ``A_ℓ``, applied in the
forward pass as ``y += ((x V_ℓ) A_ℓᵀ) U_ℓᵀ`` (never materialising the out×in product).
A perturbation with seed s picks one canonical pair (i_ℓ, j_ℓ) per layer, i.e.
z_ℓ = U_ℓ[:, i] V_ℓ[:, j]ᵀ, which is the coordinate E_ij in A-space: applying a message
(s, c) is ``A_ℓ[i_ℓ, j_ℓ] −= c`` for every layer, O(#layers) whatever the model size.
1-D tensors (biases, norms) are perturbed densely as in MeZO.

Draw order of a seed s: the pairs come from a CPU generator seeded with s (``pairs``);
the 1-D tensors' z from :func:`decent.zo.mezo.add_gaussian` with seed s on their device.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from decent.core.storable import storable
from decent.zo import mezo


@storable(fields=('names', 'shapes', 'device', 'rank', 'U', 'V'))
class SubspaceBasis:
    """The shared U_ℓ, V_ℓ of every target Linear layer (one instance per process)."""

    def __init__(self, model: nn.Module, rank: int, seed: int,
                 exclude: Sequence[str] = ()) -> None:
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") \
            else None
        # the output head is tied to the input embeddings in decent's LLMs, and the
        # classification path reads its weight directly: it stays out of the subspace
        self.names = [name for name, m in model.named_modules()
                      if isinstance(m, nn.Linear) and m is not head
                      and not any(x in name for x in exclude)]
        self.shapes = [tuple(model.get_submodule(n).weight.shape) for n in self.names]
        self.device = model.get_submodule(self.names[0]).weight.device if self.names \
            else torch.device("cpu")
        self.rank = rank
        self.U: list[torch.Tensor] = []
        self.V: list[torch.Tensor] = []
        self.rebuild(seed)

    @property
    def num_layers(self) -> int:
        return len(self.names)

    def factors(self, dtype: torch.dtype) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """U and V in ``dtype``, cast once per basis and dtype (the same bits a cast in
        every hook call gives): a half-precision forward casts no basis per layer."""
        if not self.U or self.U[0].dtype == dtype:
            return self.U, self.V
        drawn, casts = self.__dict__.get("_cast", (None, {}))
        if drawn is not self.U:  # drawn again since (rebuild): the old casts are stale
            drawn, casts = self.U, {}
            self.__dict__["_cast"] = (drawn, casts)
        if dtype not in casts:
            casts[dtype] = ([u.to(dtype) for u in self.U], [v.to(dtype) for v in self.V])
        return casts[dtype]

    def rebuild(self, seed: int) -> None:
        """Draw U, V from ``seed``: layers in order, U then V for each."""
        g = mezo.zo_generator(seed, self.device)
        self.U, self.V = [], []
        for out_f, in_f in self.shapes:
            self.U.append(torch.randn(out_f, self.rank, generator=g, device=self.device))
            self.V.append(torch.randn(in_f, self.rank, generator=g, device=self.device))

    @torch.no_grad()
    def fold(self, model: nn.Module, A: torch.Tensor) -> None:
        """``W_ℓ += U_ℓ A_ℓ V_ℓᵀ`` in place for every target of ``model``."""
        for ell, name in enumerate(self.names):
            w = model.get_submodule(name).weight
            w.add_((self.U[ell] @ A[ell] @ self.V[ell].T).to(w.dtype))


@storable
@dataclass
class SubCGEState:
    """What a replica holds privately: ``A`` (L×r×r), its 1-D tensors (biases, norms;
    the live parameters of its model) and, during a ZO evaluation only, the perturbation
    ``delta`` added to A (A itself is never modified to perturb)."""

    A: torch.Tensor
    one_d: list[torch.Tensor] = field(default_factory=list)
    delta: torch.Tensor | None = None

    def vector(self) -> np.ndarray:
        """A then the 1-D tensors, as one float64 vector."""
        parts = [self.A.reshape(-1), *(t.reshape(-1) for t in self.one_d)]
        return torch.cat([p.detach().to("cpu", torch.float64) for p in parts]).numpy()

    @torch.no_grad()
    def load_vector(self, vector: np.ndarray) -> None:
        offset = 0
        for t in (self.A, *self.one_d):
            chunk = torch.tensor(vector[offset: offset + t.numel()])
            t.copy_(chunk.reshape(t.shape).to(t.dtype))
            offset += t.numel()


def attach(model: nn.Module, basis: SubspaceBasis, state: SubCGEState) -> list[RemovableHandle]:
    """Forward hooks adding ``((x V) (A + delta)ᵀ) Uᵀ`` to each target layer's output.

    nn.Linear computes y = x Wᵀ; with W' = W + U A Vᵀ, x W'ᵀ = x Wᵀ + x V Aᵀ Uᵀ."""
    handles = []
    for ell, name in enumerate(basis.names):
        def hook(module: nn.Module, inputs: tuple, output: torch.Tensor,
                 ell: int = ell) -> torch.Tensor:
            a = state.A[ell] if state.delta is None else state.A[ell] + state.delta[ell]
            x = inputs[0]
            U, V = basis.factors(x.dtype)
            low = ((x @ V[ell]) @ a.T.to(x.dtype)) @ U[ell].T
            return output + low

        handles.append(model.get_submodule(name).register_forward_hook(hook))
    return handles


def pairs(seed: int, num_layers: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The canonical (i_ℓ, j_ℓ) ~ Unif([r]×[r]) of every layer for message ``seed``."""
    ij = pairs_drawn(seed, num_layers, rank)
    return ij[0], ij[1]


def pair_table(seeds: Sequence[int], num_layers: int, rank: int) -> torch.Tensor:
    """:func:`pairs` of every seed, stacked: ``[seeds, 2, layers]`` (i then j)."""
    return torch.stack([pairs_drawn(seed, num_layers, rank) for seed in seeds])


def pairs_drawn(seed: int, num_layers: int, rank: int) -> torch.Tensor:
    """The ``[2, layers]`` draw of :func:`pairs`."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(rank, (2, num_layers), generator=g)


def one_d_tensors(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """Parameters with one dimension (biases, norm weights), in ``named_parameters`` order."""
    return [(name, p) for name, p in model.named_parameters() if p.ndim == 1]


@torch.no_grad()
def two_point(basis: SubspaceBasis, state: SubCGEState, loss_fn: Callable[[], float],
              seed: int, eps: float) -> float:
    """α = (ℓ(θ+εz) − ℓ(θ−εz)) / 2ε for the perturbation of ``seed``.

    The A-part goes through ``state.delta`` and the 1-D tensors are restored from saved
    copies, so the model is bit-for-bit unchanged afterwards (needed for replicas to stay
    identical under flooding)."""
    i, j = pairs(seed, basis.num_layers, basis.rank)
    layers = torch.arange(basis.num_layers)
    one_d = state.one_d
    saved = [t.detach().clone() for t in one_d]
    losses = []
    for sign in (1.0, -1.0):
        delta = torch.zeros_like(state.A)
        delta[layers, i.to(delta.device), j.to(delta.device)] = sign * eps
        state.delta = delta
        mezo.add_gaussian(one_d, seed, sign * eps)
        try:
            losses.append(loss_fn())
        finally:
            state.delta = None
            for t, s in zip(one_d, saved, strict=True):
                t.copy_(s)
    return (losses[0] - losses[1]) / (2 * eps)


def batch_update(num_layers: int, rank: int,
                 messages: Sequence[tuple[int, float]]) -> tuple[torch.Tensor, np.ndarray]:
    """The A-part of a batch of messages as (distinct flat indices into A, summed values).

    Every message (s, c) subtracts c at one (i_ℓ, j_ℓ) per layer; two messages may hit
    the same entry. The values of each entry are summed here on the CPU in message order
    (``np.add.at`` is unbuffered and sequential), so the sum is a fixed function of the
    message list; the device then receives each entry once. Accumulating repeated indices
    on the device instead (``index_put_(accumulate=True)``) uses atomic adds on CUDA,
    whose order — and so the float rounding — changes from run to run."""
    L, r = num_layers, rank
    layer = np.tile(np.arange(L), len(messages))
    ii, jj = zip(*(pairs(seed, L, r) for seed, _ in messages), strict=True)
    flat = layer * r * r + torch.cat(ii).numpy() * r + torch.cat(jj).numpy()
    values = np.repeat(np.array([-c for _, c in messages], dtype=np.float32), L)
    entries, slot = np.unique(flat, return_inverse=True)
    sums = np.zeros(len(entries), dtype=np.float32)
    np.add.at(sums, slot, values)
    return torch.from_numpy(entries), sums


@torch.no_grad()
def apply_messages(state: SubCGEState, messages: Sequence[tuple[int, float]]) -> None:
    """θ ← θ − Σ c·z(s) over the messages (s, c), order-deterministic on any device.

    A-part: :func:`batch_update`'s per-entry sums added once per entry (distinct indices:
    no atomics). 1-D part: each message's z regenerated and applied in the given order,
    O(d_1D) per message (elementwise, hence deterministic too)."""
    if not messages:
        return
    L, r = state.A.shape[0], state.A.shape[1]
    entries, sums = batch_update(L, r, messages)
    flat = state.A.view(-1)
    idx = entries.to(state.A.device)
    flat[idx] = flat[idx] + torch.from_numpy(sums).to(state.A.device, state.A.dtype)
    for seed, coef in messages:
        mezo.add_gaussian(state.one_d, seed, -coef)
