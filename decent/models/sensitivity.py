"""Per-parameter sensitivity from activation statistics (DSO's "semantic" importance).

A weight W_ij of a linear layer y = W x multiplies input feature j, so how much a change of
W_ij moves the output scales with the typical size of x_j. Over a probe set, the
sensitivity of every weight in column j is the mean |x_j| over the probe tokens (the
activation statistic of Wanda, Sun et al., 2023); parameters outside linear layers
(biases, norms, embeddings) get 1. A compressor then ranks entries of an update g by
|g| ⊙ s instead of |g| alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn


@torch.no_grad()
def activation_sensitivity(model: nn.Module, batches: Iterable[Any],
                           forward: Callable[[nn.Module, Any], Any]) -> dict[str, torch.Tensor]:
    """Trainable parameter name → sensitivity broadcastable to it: a (1, in_features) row
    of mean input magnitudes for a linear layer's weight, a scalar 1 elsewhere.
    ``forward(model, batch)`` runs the model on one probe batch."""
    sums: dict[str, torch.Tensor] = {}
    counts: dict[str, int] = {}
    names = {module: name for name, module in model.named_modules()}

    def record(module: nn.Module, inputs: tuple[torch.Tensor, ...], _output: Any) -> None:
        x = inputs[0].detach().reshape(-1, inputs[0].shape[-1]).abs().double()
        key = names[module]
        sums[key] = sums.get(key, 0) + x.sum(dim=0)
        counts[key] = counts.get(key, 0) + x.shape[0]

    hooks = [m.register_forward_hook(record) for m in model.modules()
             if isinstance(m, nn.Linear)]
    was_training = model.training
    model.eval()
    try:
        for batch in batches:
            forward(model, batch)
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    out = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        module, _, leaf = name.rpartition(".")
        if leaf == "weight" and module in sums and p.dim() == 2:
            out[name] = (sums[module] / counts[module]).to(p.dtype).reshape(1, -1)
        else:
            out[name] = torch.ones((), dtype=p.dtype, device=p.device)
    return out
