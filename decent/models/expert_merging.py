"""SPES's expert-merging warm-up (Zhang et al., §3.3), as tensor functions.

Within one MoE layer, expert e's neighbours are the K other experts whose flattened input
projections are most similar to its own by cosine similarity; every expert is then moved
towards them by task arithmetic, all from the pre-merge values:

    E_e ← E_e + α · mean_{k ∈ TopK(e)} (E_k − E_e)        (``task_vectors: mean``)
    E_e ← E_e + α · Σ_{k ∈ TopK(e)} (E_k − E_e)           (``task_vectors: sum``)

The paper's equations were lost from its text; the authors' released server code settles
the form (zjr2000/SPES, ``spes/spes/spes_server_knowledge_transfer.py``,
``merge_experts_task_vector_topk_cosine_w1_per_layer``): similarity of the gate projection
``w1`` alone, per layer, and the **mean** of the K task vectors, applied to every parameter
of the expert. ``sum`` (K times the step) is kept as an option; it is not the authors'.

The input projection of a SwiGLU expert is what multiplies its input: the gate projection
(the authors' ``w1``, transformers' ``gate_proj``) and the up projection (``v1`` /
``up_proj``); ``similarity: gate_up`` concatenates both. Ties in similarity go to the
lower expert index, so the choice is deterministic.
"""

from __future__ import annotations

import torch

from decent.models.experts import SplitExperts

TASK_VECTORS = ("mean", "sum")
SIMILARITY = ("gate", "gate_up")


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
           task_vectors: str = "mean") -> torch.Tensor:
    """``weights``: one tensor per expert stacked on dim 0; every expert moved towards its
    ``neighbours`` (from :func:`most_similar`) from the pre-merge values."""
    vectors = weights[neighbours] - weights.unsqueeze(1)  # E_k − E_e, experts × K × …
    pull = vectors.mean(dim=1) if task_vectors == "mean" else vectors.sum(dim=1)
    return weights + alpha * pull


def input_projection(expert: torch.nn.Module, similarity: str = "gate") -> torch.Tensor:
    gate = expert.gate_proj.weight.reshape(-1)
    if similarity == "gate":
        return gate
    return torch.cat([gate, expert.up_proj.weight.reshape(-1)])


@torch.no_grad()
def merge_layer(layer: SplitExperts, k: int, alpha: float, task_vectors: str = "mean",
                similarity: str = "gate") -> torch.Tensor:
    """Merge one layer's experts in place; the neighbour indices used (experts × k)."""
    neighbours = most_similar(torch.stack([input_projection(e, similarity) for e in layer]), k)
    names = [name for name, _ in layer[0].named_parameters()]
    for name in names:
        live = [dict(expert.named_parameters())[name] for expert in layer]
        new = merged(torch.stack([p.detach() for p in live]), neighbours, alpha, task_vectors)
        for p, value in zip(live, new, strict=True):
            p.copy_(value)
    return neighbours
