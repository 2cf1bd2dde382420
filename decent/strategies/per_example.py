"""Per-example gradients: what DP-SGD clips (:mod:`decent.privacy.gaussian` describes
the whole mechanism).

An example's gradient is the gradient of the task's loss on a batch of that example
alone. It is therefore a function of that example and the model only, which is what lets
clipping bound one example's influence on the sum by C whatever the task's loss is. Every
task's loss is the mean of its examples' own losses (the cross-entropy of a labelled
example, a sequence's mean next-token loss with every sequence as long, a preference
pair's logistic loss), so without clipping these gradients also average to the batch's.

They are computed in one pass with ``torch.func``: ``vmap`` over the examples of
``grad_and_value`` of the loss, the model called on the given tensors through
:class:`~decent.models.functional.BoundModule` (``functional_call``), as the engine's
batched clients are. A model that one vmap cannot trace takes one backward pass per
example instead — exact, only slower (:func:`vmap_problem` says which models).
"""

from __future__ import annotations

import torch
from torch.func import grad_and_value, vmap

from decent.models import params
from decent.models.functional import BoundModule, is_transformers
from decent.tasks.base import Task

Tensors = dict[str, torch.Tensor]


def vmap_problem(model: torch.nn.Module) -> str | None:
    """Why ``model``'s per-example gradients cannot be one ``vmap`` (None: they can)."""
    if is_transformers(model):
        # its attention-mask code branches on the data (is any position padded?), which
        # vmap cannot trace
        return "a transformers model"
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.modules.batchnorm._NormBase) \
                and module.track_running_stats:
            # training updates the running statistics in place: one buffer that every
            # vmapped example would write
            return f"its layer {name or 'model'} keeps running statistics"
        if isinstance(module, torch.nn.modules.dropout._DropoutNd) and module.p > 0:
            # vmap refuses random operations unless told how to draw them, and any way it
            # draws differs from the example-by-example masks of the loop
            return f"its layer {name or 'model'} is a dropout (p={module.p})"
    return None


def per_example_gradients(model: torch.nn.Module, task: Task,
                          batch: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, Tensors]:
    """Each example's loss (``[b]``) and gradient with respect to every trainable tensor
    (``{name: [b, *shape]}``, detached); the model's ``.grad`` is left alone."""
    model.train()
    live = params.trainable_params(model)
    size = int(batch[0].shape[0])
    if size == 0:  # an empty Poisson sample: nothing to differentiate
        return (torch.zeros(0, device=batch[0].device),
                {n: torch.zeros((0, *p.shape), dtype=p.dtype, device=p.device)
                 for n, p in live.items()})
    if vmap_problem(model) is None:
        def example_loss(values: Tensors, *example: torch.Tensor) -> torch.Tensor:
            return task.loss(BoundModule(model, values),
                             tuple(t.unsqueeze(0) for t in example))

        values = {n: p.detach() for n, p in live.items()}
        grads, losses = vmap(grad_and_value(example_loss),
                             in_dims=(None, *(0,) * len(batch)))(values, *batch)
        return losses.detach(), {n: g.detach() for n, g in grads.items()}
    losses: list[torch.Tensor] = []
    rows: dict[str, list[torch.Tensor]] = {n: [] for n in live}
    for i in range(size):
        loss = task.loss(model, tuple(t[i: i + 1] for t in batch))
        for name, g in zip(live, torch.autograd.grad(loss, list(live.values())), strict=True):
            rows[name].append(g.detach())
        losses.append(loss.detach())
    return torch.stack(losses), {n: torch.stack(r) for n, r in rows.items()}
