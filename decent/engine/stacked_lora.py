"""Several clients' LoRA steps through one forward pass of the shared frozen model.

Clients with LoRA share every base weight W and own only their adapters (A_c, B_c). As
multi-LoRA serving does, their batches go through the base model as one batch (the
clients' examples side by side), and each adapted layer adds each client's low-rank term
with a batched matmul: y = x W^T + s · (x_c A_c^T) B_c^T for the rows x_c of client c. The
loss of each client is the mean of its own examples' losses (:meth:`Task.example_losses`),
so the gradient of their sum with respect to the stacked adapters is, row by row, each
client's own gradient.

A ``transformers`` model cannot go through ``torch.func.vmap`` (its attention-mask code
branches on the data), which is why this path is written with plain autograd and hooks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from decent.tasks.base import Task


@dataclass(frozen=True)
class AdaptedLayer:
    """One LoRA-adapted linear layer: its module and its adapter tensors' names."""

    module: torch.nn.Module
    a: str
    b: str
    scaling: float


def adapted_layers(model: torch.nn.Module) -> list[AdaptedLayer] | None:
    """The model's LoRA layers (peft's), if its trainable tensors are exactly their
    adapters of one active adapter; None otherwise (another trainable tensor, a head in
    ``modules_to_save``, no LoRA at all)."""
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    layers, covered = [], set()
    for name, module in model.named_modules():
        lora_a = getattr(module, "lora_A", None)
        if not isinstance(lora_a, torch.nn.ModuleDict) or not len(lora_a):
            continue
        adapters = list(getattr(module, "active_adapters", []))
        if len(adapters) != 1 or adapters[0] not in lora_a:
            return None
        key = adapters[0]
        a, b = f"{name}.lora_A.{key}.weight", f"{name}.lora_B.{key}.weight"
        layers.append(AdaptedLayer(module, a, b, float(module.scaling[key])))
        covered.update((a, b))
    return layers if layers and covered == trainable else None


def lora_grads(model: torch.nn.Module, layers: list[AdaptedLayer], task: Task,
               params: dict[str, torch.Tensor], batch: tuple[torch.Tensor, ...]
               ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Each row's gradient with respect to its adapters ``params[name][row]`` and each
    row's loss, for ``batch`` (each tensor ``[rows, examples, …]``): one forward and one
    backward through the base weights for all rows."""
    rows = batch[0].shape[0]
    leaves = {n: t.detach().requires_grad_() for n, t in params.items()}
    # the low-rank terms run in the base's compute dtype: each adapter stack is cast once
    # per step (a no-op where the dtypes agree), not the activations in every layer's
    # hook; the gradient flows back through the cast into the float32 leaves, where
    # the optimiser's step and moments keep full precision
    compute = {}
    for layer in layers:
        dtype = layer.module.base_layer.weight.dtype
        for name in (layer.a, layer.b):
            compute[name] = leaves[name].to(dtype)
    hooks = [layer.module.register_forward_hook(low_rank_term(layer, compute, rows))
             for layer in layers]
    try:  # (a phase may run under no_grad; these gradients are taken here)
        with torch.enable_grad(), model.disable_adapter():  # type: ignore[operator]
            losses = task.example_losses(model, tuple(t.flatten(0, 1) for t in batch))
    finally:
        for hook in hooks:
            hook.remove()
    per_row = losses.reshape(rows, -1).mean(dim=1)
    grads = torch.autograd.grad(per_row.sum(), list(leaves.values()))
    return dict(zip(leaves, grads, strict=True)), per_row.detach()


def low_rank_term(layer: AdaptedLayer, leaves: dict[str, torch.Tensor],
                  rows: int) -> Callable[..., torch.Tensor]:
    """A forward hook adding s · (x_c A_c^T) B_c^T to the base layer's output, each row
    block c of the batch with its own adapters (one ``bmm`` per factor), in the
    adapters' dtype as given (the base's compute dtype: no cast here)."""
    a, b = leaves[layer.a], leaves[layer.b]  # [rows, r, in], [rows, out, r]

    def hook(module: torch.nn.Module, args: tuple[torch.Tensor, ...],
             out: torch.Tensor) -> torch.Tensor:
        per_row = args[0].reshape(rows, -1, args[0].shape[-1])
        low = torch.bmm(torch.bmm(per_row, a.transpose(1, 2)), b.transpose(1, 2))
        return out + (layer.scaling * low).reshape(out.shape)

    return hook
