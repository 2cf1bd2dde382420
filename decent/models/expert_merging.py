"""SPES's expert-merging warm-up (Zhang et al., §3.3), as tensor functions.

Within one MoE layer, expert e's neighbours are the K other experts whose flattened input
projections are most similar to its own by cosine similarity; every expert is then moved
towards them by task arithmetic, all from the pre-merge values:

    E_e ← E_e + α Σ_{k ∈ TopK(e)} (E_k − E_e)        (or α/K · Σ …, ``normalise``)

The input projection of a SwiGLU expert is what multiplies its input: the gate and up
projections, concatenated (transformers' fused ``gate_up_proj``). Ties in similarity go to
the lower expert index, so the choice is deterministic.
"""

from __future__ import annotations

import torch

from decent.models.experts import SplitExperts


def most_similar(projections: torch.Tensor, k: int) -> torch.Tensor:
    """``projections``: one flattened input projection per expert (experts × p). The
    indices (experts × k) of each expert's k most cosine-similar other experts, most
    similar first."""
    unit = torch.nn.functional.normalize(projections.double(), dim=1)
    similarity = unit @ unit.T
    similarity.fill_diagonal_(-float("inf"))  # an expert is not its own neighbour
    order = torch.sort(similarity, dim=1, descending=True, stable=True).indices
    return order[:, :k]


def merged(weights: torch.Tensor, neighbours: torch.Tensor, alpha: float,
           normalise: bool) -> torch.Tensor:
    """``weights``: one tensor per expert stacked on dim 0; every expert moved towards its
    ``neighbours`` (from :func:`most_similar`) from the pre-merge values."""
    pull = (weights[neighbours] - weights.unsqueeze(1)).sum(dim=1)  # Σ_k (E_k − E_e)
    scale = alpha / neighbours.shape[1] if normalise else alpha
    return weights + scale * pull


def input_projection(expert: torch.nn.Module) -> torch.Tensor:
    return torch.cat([expert.gate_proj.weight.reshape(-1), expert.up_proj.weight.reshape(-1)])


@torch.no_grad()
def merge_layer(layer: SplitExperts, k: int, alpha: float, normalise: bool) -> torch.Tensor:
    """Merge one layer's experts in place; the neighbour indices used (experts × k)."""
    neighbours = most_similar(torch.stack([input_projection(e) for e in layer]), k)
    names = [name for name, _ in layer[0].named_parameters()]
    for name in names:
        live = [dict(expert.named_parameters())[name] for expert in layer]
        new = merged(torch.stack([p.detach() for p in live]), neighbours, alpha, normalise)
        for p, value in zip(live, new, strict=True):
            p.copy_(value)
    return neighbours
