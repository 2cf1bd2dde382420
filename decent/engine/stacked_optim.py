"""torch's SGD and AdamW steps over a chunk's stacked tensors (``[width, …]``): the same
element-wise formulas as ``torch.optim``'s single-tensor path, so a stacked client steps
as it would alone (:mod:`decent.engine.stacked`)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.optim.adamw import adamw
from torch.optim.sgd import sgd


def sgd_step(p: torch.Tensor, g: torch.Tensor, state: dict[str, torch.Tensor], lr: float,
             hyper: tuple[float, ...]) -> None:
    """torch.optim.SGD's step (``torch.optim.sgd.sgd``, its single-tensor path) on ``p``
    in place: d = g + λθ; b ← μb + d; θ ← θ − η b. A zero buffer gives the first step's
    ``b = d`` exactly, as torch's missing one does."""
    momentum, weight_decay = hyper[0], hyper[1]
    buffers = [state["momentum_buffer"]] if momentum != 0 else [None]
    sgd([p], [g], buffers, foreach=False, weight_decay=weight_decay,
                        momentum=momentum, lr=lr, dampening=0.0, nesterov=False,
                        maximize=False)


def adamw_step(p: torch.Tensor, g: torch.Tensor, state: dict[str, torch.Tensor], lr: float,
               hyper: tuple[float, ...]) -> None:
    """torch.optim.AdamW's step (``torch.optim.adamw.adamw``, its single-tensor path) on
    ``p`` in place, the rows sharing one step count (``state["step"]``: per row, equal)."""
    weight_decay, beta1, beta2, eps = hyper[1], hyper[2], hyper[3], hyper[4]
    count = state["step"][:1].clone().reshape(())  # torch keeps one float32 scalar
    adamw([p], [g], [state["exp_avg"]], [state["exp_avg_sq"]], [],
                            [count], foreach=False, capturable=False, amsgrad=False,
                            beta1=beta1, beta2=beta2, lr=lr, weight_decay=weight_decay,
                            eps=eps, maximize=False)
    state["step"].fill_(float(count))


OptimizerStep = Callable[..., None]
OPTIMIZER_STEPS: dict[type, OptimizerStep] = {torch.optim.SGD: sgd_step,
                                              torch.optim.AdamW: adamw_step}
