"""Calling a model functionally, for ``torch.func``: with tensors of one's choosing in
place of its parameters (what a vmap over clients or over examples differentiates), and
whether a model is a ``transformers`` one (whose forward vmap cannot trace)."""

from __future__ import annotations

from typing import Any

import torch
from torch.func import functional_call


def is_transformers(model: torch.nn.Module) -> bool:
    return any(type(m).__module__.startswith(("transformers.", "peft."))
               for m in model.modules())


class BoundModule:
    """``module`` called with ``params`` in place of its own (what a task's loss calls)."""

    def __init__(self, module: torch.nn.Module, params: dict[str, torch.Tensor]) -> None:
        self.module, self.params = module, params

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return functional_call(self.module, self.params, args, kwargs)

    def __getattr__(self, name: str) -> Any:  # config, dtype, …: the module's own
        return getattr(self.module, name)
