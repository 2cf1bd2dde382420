"""A chunk's zeroth-order estimates as one computation: every waiting client's ±ε losses
from one forward per sign (the strategies' :class:`~decent.strategies.zo_estimate.
EstimateRequest`).

Two ways, by model:

* **A transformers model under SubCGE: one forward of the shared base.** The replicas of
  a process share every weight W and the basis U, V; each owns A (L×r×r) and its 1-D
  tensors. The clients' batches go through ONE model (the first request's, its own SubCGE
  hooks set aside) as one batch, and hooks add each client's ``((x_c V)(A_c+δ_c)ᵀ)Uᵀ`` to
  its row block (``bmm``), as ``stacked_lora`` does for LoRA; an embedding adds each
  client's ``(U[ids] (A_c+δ_c)) Vᵀ`` to its rows, and a head tied to it that embedding's
  term in the Linear form (``subcge.attach``'s terms, per row). The 1-D tensors are applied
  per row at their module's output: a norm's weight as a scale and a bias as a shift
  (Llama RMSNorm ``weight * h``; OPT's LayerNorm ``weight * ĥ + bias``; a Linear's bias).
  The module runs with the neutral tensor (ones, zeros) and each client's (perturbed)
  tensor multiplies or is added to its own rows: for RMSNorm this is bit-exact; for a
  LayerNorm or a biased Linear the fused kernel's rounding is replaced by a separate
  product and sum, within the losses' tolerance like the rest of the stacked forward.
  Each client's loss is the mean of its own examples' losses (``Task.example_losses``).
* **Any other model: ``torch.func.vmap`` over ``functional_call``**, as
  ``engine/stacked.py`` does for first-order steps, with each client's parameters as it
  sees them at ±ε: dense MeZO perturbs each client's own tensors in place exactly as
  sequential mode does; SubCGE passes W + U(A_c+δ_c)Vᵀ and the perturbed 1-D tensors.

δ_c, the 1-D perturbation and each client's batch, seed and ε are its own, drawn as in
sequential mode (``subcge.pairs``, ``mezo.add_gaussian`` on copies). Nothing a client
holds is written, except dense MeZO's in-place ±ε, which replays sequential mode's
element-wise operations and so leaves the same bits (θ restored exactly by DenseMeZO,
up to MeZO's own residue by its in-place step): flooding's replicas stay bit-identical.

Exactness: the perturbed parameters, the models after the estimate and every message
applied are bit-for-bit sequential mode's; the losses are not, because a forward over
several clients' rows (and a vmapped matmul) may block and sum differently. Measured on
the CPU: losses within 2e-7 relative (tiny Llama, 16 clients; MLP), so α differs by up to
~|ℓ|·4e-7/2ε. :data:`LOSS_RTOL` is the tolerance the tests hold the losses to.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.func import vmap

from decent.engine.stacked import BoundModule, is_transformers
from decent.models import params
from decent.strategies.zo_estimate import EstimateRequest
from decent.zo import mezo, subcge
from decent.zo.estimators import DenseMeZO, InPlaceMeZO, SubCGE

LOSS_RTOL = 1e-6  # batched vs sequential losses (relative); measured ≤ 2e-7 on a CPU

# norms computing ``weight * normalised(h)`` (weight last, no bias): applying the weight
# to the output instead is the same product
RMS_NORMS = ("LlamaRMSNorm", "MistralRMSNorm", "Qwen2RMSNorm")
SCALE, SHIFT = "scale", "shift"  # how a 1-D tensor acts on its module's output


def model_problem(model: nn.Module, estimator: str) -> str | None:
    """Why a transformers model's ZO estimates with ``estimator`` cannot be stacked (None:
    they can); other models are vmapped and checked as for first-order steps."""
    if estimator != "subcge":
        return ("dense MeZO perturbations of a transformers model cannot be vmapped (its "
                "attention-mask code branches on the data): use strategy.estimator subcge")
    return one_d_problem(model)


def one_d_role(model: nn.Module, name: str) -> str | None:
    """How the 1-D tensor ``name`` acts on its module's output (SCALE or SHIFT), or None
    where it is not an elementwise scale or shift of that output."""
    owner, _, attr = name.rpartition(".")
    module = model.get_submodule(owner)
    if type(module).__name__ in RMS_NORMS and attr == "weight":
        return SCALE
    if isinstance(module, nn.LayerNorm) and attr in ("weight", "bias"):
        return SCALE if attr == "weight" else SHIFT
    if isinstance(module, nn.Linear) and attr == "bias":
        return SHIFT
    return None


def one_d_problem(model: nn.Module) -> str | None:
    for name, _ in subcge.one_d_tensors(model):
        if one_d_role(model, name) is None:
            return (f"its 1-D tensor {name} is neither a norm's weight or bias nor a "
                    "Linear's bias, which the stacked SubCGE forward cannot apply per "
                    "client")
    return None


def unstackable(request: EstimateRequest) -> str | None:
    """Why ``request`` is computed alone (None: it stacks)."""
    est, model = request.estimator, request.client.model
    if isinstance(est, SubCGE):
        if not is_transformers(model):
            return None
        if not request.task.splits_losses:
            return f"task '{request.task.name}' has no per-example losses"
        return one_d_problem(model)
    if type(est) not in (DenseMeZO, InPlaceMeZO):
        return f"the estimator {type(est).__name__}"
    if is_transformers(model):
        return "a transformers model cannot be vmapped"
    live = list(params.trainable_params(model).values())
    tensors = request.replica.tensors  # type: ignore[union-attr]
    if len(live) != len(tensors) or any(a is not b for a, b in zip(live, tensors, strict=True)):
        return "its perturbed tensors are not its model's trainable ones"
    return None


@torch.no_grad()
def estimates(requests: list[EstimateRequest]) -> dict[int, tuple[float, list[float]]]:
    """Each request's (α, [ℓ(+ε), ℓ(−ε)]); the requests share their estimator and task."""
    est = requests[0].estimator
    if isinstance(est, SubCGE):
        hooked = is_transformers(requests[0].client.model)
        plus, minus = (subcge_hooked if hooked else subcge_vmapped)(requests)
    else:
        plus, minus = dense_vmapped(requests, restore=type(est) is DenseMeZO)
    out = {}
    for req, lp, lm in zip(requests, plus.tolist(), minus.tolist(), strict=True):
        out[req.client.cid] = ((lp - lm) / (2 * req.eps), [lp, lm])
    return out


def stacked_batch(requests: list[EstimateRequest]) -> tuple[torch.Tensor, ...]:
    return requests[0].client.data.stack([r.batch for r in requests])  # type: ignore[union-attr]


def deltas(requests: list[EstimateRequest], basis: subcge.SubspaceBasis,
           sign: float) -> torch.Tensor:
    """Each row's A + δ (rows × L × r × r), δ as ``subcge.two_point`` draws it: every
    row's ±ε written at its (i_ℓ, j_ℓ) in one scatter."""
    L, r = basis.num_layers, basis.rank
    A = torch.stack([req.replica.A for req in requests])  # type: ignore[union-attr]
    ij = subcge.pair_table([req.seed for req in requests], L, r).to(A.device)
    rows = torch.arange(len(requests), device=A.device)[:, None]
    layers = torch.arange(L, device=A.device)[None, :]
    eps = torch.tensor([sign * req.eps for req in requests], dtype=A.dtype, device=A.device)
    delta = torch.zeros_like(A)
    delta[rows, layers, ij[:, 0], ij[:, 1]] = eps[:, None].expand(len(requests), L)
    return A + delta


def perturbed_one_d(requests: list[EstimateRequest], sign: float) -> list[torch.Tensor]:
    """Every row's 1-D tensors at ±ε, one stack (rows × size) per tensor: each client's z
    drawn from its seed as ``mezo.add_gaussian`` draws it, then one addition per tensor
    for all rows (the same element-wise ``t + scale · z`` as the in-place one, on
    copies). Rows with different ε (clients of differently configured runs never share
    a chunk, so only in principle) are added row by row."""
    bases = [torch.stack(ts) for ts in zip(*(req.replica.one_d  # type: ignore[union-attr]
                                            for req in requests), strict=True)]
    if not bases:
        return []
    draws = [mezo.gaussians(req.replica.one_d, req.seed)  # type: ignore[union-attr]
             for req in requests]
    zs = [torch.stack(z) for z in zip(*draws, strict=True)]
    scales = {sign * req.eps for req in requests}
    if len(scales) == 1:
        scale = scales.pop()
        return [torch.add(base, z, alpha=scale) for base, z in zip(bases, zs, strict=True)]
    out = [base.clone() for base in bases]
    for row, req in enumerate(requests):
        for t, z in zip(out, zs, strict=True):
            t[row].add_(z[row], alpha=sign * req.eps)
    return out


class HooksAside:
    """The forward hooks of ``modules`` removed for the duration, then put back as
    they were (a model's own SubCGE hooks read its own replica)."""

    def __init__(self, modules: list[nn.Module]) -> None:
        self.modules = modules
        self.saved: list[dict[int, Any]] = []

    def __enter__(self) -> HooksAside:
        self.saved = [dict(m._forward_hooks) for m in self.modules]
        for m in self.modules:
            m._forward_hooks.clear()
        return self

    def __exit__(self, *exc: object) -> None:
        for m, saved in zip(self.modules, self.saved, strict=True):
            m._forward_hooks.clear()
            m._forward_hooks.update(saved)


def subcge_hooked(requests: list[EstimateRequest]) -> tuple[torch.Tensor, torch.Tensor]:
    """Every row's ±ε losses, one forward of the shared base per sign."""
    est: SubCGE = requests[0].estimator  # type: ignore[assignment]
    basis = est.basis
    assert basis is not None
    model, task, rows = requests[0].client.model, requests[0].task, len(requests)
    batch = tuple(t.flatten(0, 1) for t in stacked_batch(requests))
    targets = [model.get_submodule(n) for n in basis.names]
    # (owner module, attribute, role) of every 1-D tensor, in named_parameters order
    one_d = [(model.get_submodule(owner), attr, one_d_role(model, name))
             for name, _ in subcge.one_d_tensors(model)
             for owner, _, attr in [name.rpartition(".")]]
    owners = [m for m, _, _ in one_d]
    current: dict[str, Any] = {}
    # the low-rank terms in the model's compute dtype: U, V cast once per basis, A + δ
    # once per sign for every layer, none in the hooks (float32: no cast at all)
    dtype = targets[0].weight.dtype if targets else torch.float32
    Us, Vs = basis.factors(dtype)

    def low_rank(ell: int) -> Any:
        U, V = Us[ell], Vs[ell]

        def hook(module: nn.Module, inputs: tuple, out: torch.Tensor) -> torch.Tensor:
            a = current["a"][:, ell]  # rows × r × r
            xv = (inputs[0] @ V).reshape(rows, -1, V.shape[1])
            low = torch.bmm(xv, a.transpose(1, 2)) @ U.T
            return out + low.reshape(out.shape)
        return hook

    def low_rank_rows(ell: int) -> Any:
        """An embedding's: each client's looked-up rows of U (A_c + δ_c) Vᵀ."""
        U, V = Us[ell], Vs[ell]

        def hook(module: nn.Module, args: tuple, kwargs: dict,
                 out: torch.Tensor) -> torch.Tensor:
            a = current["a"][:, ell]
            ua = U[subcge.embedding_indices(module, args, kwargs)].reshape(rows, -1, U.shape[1])
            return out + (torch.bmm(ua, a) @ V.T).reshape(out.shape)
        return hook

    def per_row(k: int, role: str | None) -> Any:
        def hook(module: nn.Module, inputs: tuple, out: torch.Tensor) -> torch.Tensor:
            t = current["w"][k][:, None, :]  # rows × 1 × hidden: each client's own rows
            blocks = out.reshape(rows, -1, out.shape[-1])
            return (t * blocks if role == SCALE else blocks + t).reshape(out.shape)
        return hook

    # the modules run with neutral 1-D tensors (ones scale, zeros shift); each client's
    # own is applied to its rows by the hooks, in named_parameters order (a LayerNorm's
    # weight before its bias, a Linear's bias after its low-rank term)
    live = [m._parameters[attr] for m, attr, _ in one_d]
    neutral = [nn.Parameter(torch.ones_like(t) if role == SCALE else torch.zeros_like(t),
                            requires_grad=False)
               for t, (_, _, role) in zip(live, one_d, strict=True)]
    losses = []
    # a head tied to a target embedding adds that embedding's term in the Linear form
    tied = subcge.tied_head(model, basis)
    heads = [tied[0]] if tied is not None else []
    with HooksAside(list({id(m): m for m in targets + owners + heads}.values())):
        handles = [m.register_forward_hook(low_rank_rows(ell), with_kwargs=True)
                   if isinstance(m, nn.Embedding) else m.register_forward_hook(low_rank(ell))
                   for ell, m in enumerate(targets)]
        if tied is not None:
            handles.append(tied[0].register_forward_hook(low_rank(tied[1])))
        handles += [m.register_forward_hook(per_row(k, role))
                    for k, (m, _, role) in enumerate(one_d)]
        try:
            for (m, attr, _), t in zip(one_d, neutral, strict=True):
                m._parameters[attr] = t
            for sign in (1.0, -1.0):
                current["a"] = deltas(requests, basis, sign).to(dtype)
                current["w"] = perturbed_one_d(requests, sign)
                per_example = task.example_losses(model, batch)
                losses.append(per_example.reshape(rows, -1).mean(dim=1))
        finally:
            for (m, attr, _), t in zip(one_d, live, strict=True):
                m._parameters[attr] = t  # the very tensor: the replica's own
            for h in handles:
                h.remove()
    return losses[0], losses[1]


def vmapped_losses(model: nn.Module, task: Any, stacks: dict[str, torch.Tensor],
                   batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    def loss_of(p: dict[str, torch.Tensor], b: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return task.loss(BoundModule(model, p), b)

    return vmap(loss_of)(stacks, batch)


def subcge_vmapped(requests: list[EstimateRequest]) -> tuple[torch.Tensor, torch.Tensor]:
    """Every row's ±ε losses with W + U(A_c+δ_c)Vᵀ and the perturbed 1-D tensors."""
    est: SubCGE = requests[0].estimator  # type: ignore[assignment]
    basis = est.basis
    assert basis is not None
    model, task = requests[0].client.model, requests[0].task
    batch = stacked_batch(requests)
    targets = [model.get_submodule(n) for n in basis.names]
    one_d_names = [n for n, _ in subcge.one_d_tensors(model)]
    losses = []
    with HooksAside(targets):
        for sign in (1.0, -1.0):
            a = deltas(requests, basis, sign)
            # every row's W + U (A_c + δ_c) Vᵀ of a layer in one batched product
            stacks = {f"{name}.weight": m.weight + (basis.U[ell] @ a[:, ell] @ basis.V[ell].T
                                                    ).to(m.weight.dtype)
                      for ell, (name, m) in enumerate(zip(basis.names, targets, strict=True))}
            stacks.update(zip(one_d_names, perturbed_one_d(requests, sign), strict=True))
            losses.append(vmapped_losses(model, task, stacks, batch))
    return losses[0], losses[1]


def dense_vmapped(requests: list[EstimateRequest],
                  restore: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Every row's ±ε losses under dense MeZO: each client's tensors perturbed in place
    by +ε, −2ε, +ε (``mezo.two_point``'s sequence), restored from copies if ``restore``
    (``DenseMeZO.estimate``)."""
    model, task = requests[0].client.model, requests[0].task
    names = list(params.trainable_params(model))
    tensors = [r.replica.tensors for r in requests]  # type: ignore[union-attr]
    saved = [[t.detach().clone() for t in ts] for ts in tensors] if restore else []
    batch = stacked_batch(requests)
    losses = []
    for scale in (1.0, -2.0):
        for req, ts in zip(requests, tensors, strict=True):
            mezo.add_gaussian(ts, req.seed, scale * req.eps)
        stacks = {n: torch.stack(ts) for n, ts in zip(names, zip(*tensors, strict=True),
                                                       strict=True)}
        losses.append(vmapped_losses(model, task, stacks, batch))
    for req, ts in zip(requests, tensors, strict=True):
        mezo.add_gaussian(ts, req.seed, req.eps)
    if restore:
        for ts, copies in zip(tensors, saved, strict=True):
            for t, s in zip(ts, copies, strict=True):
                t.copy_(s)
    return losses[0], losses[1]
