"""SubCGE: zeroth-order estimates in a shared low-rank subspace (SeedFlood paper, §3.4 and
Appendix A).

Every target weight W_ℓ (n×m) gets ``U_ℓ`` (n×r) and ``V_ℓ`` (m×r) with N(0, 1) entries
drawn from the global seed — the same on every client. A client's model is
``W_ℓ + U_ℓ A_ℓ V_ℓᵀ`` with a private r×r buffer ``A_ℓ``, applied in the forward pass
without materialising the n×m product: an ``nn.Linear`` (W out×in) adds
``((x V_ℓ) A_ℓᵀ) U_ℓᵀ`` to its output, an ``nn.Embedding`` (W rows×dim) adds
``(U_ℓ[ids] A_ℓ) V_ℓᵀ`` to the rows it looks up.

Which weights are targets (``layers``): ``all_2d``, the paper's Algorithm 1 ("foreach ℓ-th
2D layer"; Appendix A: "each two-dimensional weight matrix maintains an additional
buffer"), is every Linear and Embedding weight. An output head tied to the input
embeddings is that embedding's layer, not another: its forward adds the embedding's
low-rank term in the Linear form, so head and embedding stay one matrix (as folding it
into W keeps them). An untied head is a layer of its own. ``linear`` is every Linear but
the head (the embeddings and head frozen), what SubCGE covered before ``all_2d``.
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

from decent.core.errors import ConfigError
from decent.core.storable import storable
from decent.models.label_logits import OUTPUT_HOOKED
from decent.zo import mezo

LAYER_SETS = ("all_2d", "linear")
# an Embedding subclass whose forward computes its own indices, and how to read them:
# OPT's learned positions look up position_ids + offset (transformers'
# OPTLearnedPositionalEmbedding.forward; the decoder passes position_ids by keyword)
POSITIONAL = ("OPTLearnedPositionalEmbedding",)


def output_head(model: nn.Module) -> nn.Module | None:
    find = getattr(model, "get_output_embeddings", None)
    return find() if callable(find) else None


def target_names(model: nn.Module, layers: str, exclude: Sequence[str] = ()) -> list[str]:
    """The modules whose weight SubCGE perturbs, in ``named_modules`` order."""
    head = output_head(model)
    embeddings = [m for m in model.modules() if isinstance(m, nn.Embedding)]
    tied = head is not None and any(head.weight is e.weight for e in embeddings)
    names = []
    for name, m in model.named_modules():
        if any(x in name for x in exclude):
            continue
        if isinstance(m, nn.Linear):
            # linear: the head stays out (it was frozen with the embeddings); all_2d: a
            # tied head is its embedding's layer, an untied one its own
            if m is head and (layers == "linear" or tied):
                continue
            names.append(name)
        elif isinstance(m, nn.Embedding) and layers == "all_2d":
            if type(m).forward is not nn.Embedding.forward \
                    and type(m).__name__ not in POSITIONAL:
                raise ConfigError("strategy.layers", f"all_2d: the embedding {name} "
                                  f"({type(m).__name__}) looks up indices of its own making, "
                                  "which SubCGE cannot read; use strategy.layers linear")
            names.append(name)
    return names


def tied_head(model: nn.Module, basis: SubspaceBasis) -> tuple[nn.Module, int] | None:
    """The output head and the layer of the embedding it shares its weight with (None:
    no head, or one not tied to a target embedding)."""
    head = output_head(model)
    if head is None or not isinstance(head, nn.Linear):
        return None
    for ell, name in enumerate(basis.names):
        target = model.get_submodule(name)
        if isinstance(target, nn.Embedding) and target.weight is head.weight:
            return head, ell
    return None


def embedding_indices(module: nn.Module, args: tuple, kwargs: dict) -> torch.Tensor:
    """The rows an embedding's forward looks up (:data:`POSITIONAL` for the kinds that
    compute them)."""
    if type(module).forward is nn.Embedding.forward:
        return args[0] if args else kwargs["input"]
    positions = kwargs.get("position_ids")
    if positions is None:
        raise RuntimeError(f"{type(module).__name__} was called without position_ids, "
                           "which SubCGE reads to add its low-rank rows")
    return positions + module.offset  # type: ignore[operator]


@storable(fields=('names', 'shapes', 'device', 'rank', 'U', 'V'))
class SubspaceBasis:
    """The shared U_ℓ, V_ℓ of every target layer (one instance per process)."""

    def __init__(self, model: nn.Module, rank: int, seed: int,
                 exclude: Sequence[str] = (), layers: str = "all_2d") -> None:
        self.names = target_names(model, layers, exclude)
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
    """Forward hooks adding each target's low-rank term (A + delta) to its output.

    nn.Linear computes y = x Wᵀ; with W' = W + U A Vᵀ, x W'ᵀ = x Wᵀ + x V Aᵀ Uᵀ.
    nn.Embedding looks up W[ids]; W'[ids] = W[ids] + U[ids] A Vᵀ. A head tied to an
    embedding is y = h Wᵀ with that W: the Linear form, with the embedding's U, V, A."""

    def a_of(ell: int, dtype: torch.dtype) -> torch.Tensor:
        a = state.A[ell] if state.delta is None else state.A[ell] + state.delta[ell]
        return a.to(dtype)

    def linear_hook(ell: int) -> Callable[..., torch.Tensor]:
        def hook(module: nn.Module, inputs: tuple, output: torch.Tensor) -> torch.Tensor:
            x = inputs[0]
            U, V = basis.factors(x.dtype)
            return output + ((x @ V[ell]) @ a_of(ell, x.dtype).T) @ U[ell].T
        return hook

    def embedding_hook(ell: int) -> Callable[..., torch.Tensor]:
        def hook(module: nn.Module, args: tuple, kwargs: dict,
                 output: torch.Tensor) -> torch.Tensor:
            U, V = basis.factors(output.dtype)
            rows = U[ell][embedding_indices(module, args, kwargs)]
            return output + (rows @ a_of(ell, output.dtype)) @ V[ell].T
        return hook

    handles = []
    for ell, name in enumerate(basis.names):
        module = model.get_submodule(name)
        if isinstance(module, nn.Embedding):
            handles.append(module.register_forward_hook(embedding_hook(ell), with_kwargs=True))
        else:
            handles.append(module.register_forward_hook(linear_hook(ell)))
    tied = tied_head(model, basis)
    if tied is not None:
        head, ell = tied
        handles.append(head.register_forward_hook(linear_hook(ell)))
        OUTPUT_HOOKED.add(head)  # label-word logits must go through its forward
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
