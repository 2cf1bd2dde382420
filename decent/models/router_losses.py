"""The router's auxiliary losses of a mixture-of-experts model, read off any forward pass.

MoE pretraining (OLMoE, Muennighoff et al., 2024; SPES) adds two terms to the
cross-entropy:

* the **load-balancing loss** of Switch Transformers (Fedus et al., 2022), E · Σ_e f_e · P_e
  with f_e the fraction of top-k assignments that go to expert e and P_e its mean router
  probability, summed over the layers' tokens; transformers' own
  ``load_balancing_loss_func`` computes it (OLMoE's coefficient: 0.01);
* the **router z-loss** of ST-MoE (Zoph et al., 2022), the mean over tokens of
  (log Σ_e exp z_e)², which keeps router logits small (OLMoE's coefficient: 0.001);
  averaged over the layers here.

:class:`RouterLogits` collects the logits with forward hooks on each MoE block's router,
so the task's own loss (a plain forward) needs no change and dense models cost nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType
from typing import Any

import torch
from torch import nn

from decent.core.schema import at_least
from decent.models.experts import SplitExperts


@dataclass
class RouterLossConfig:
    """Coefficients of the router losses added to a training step's loss (0: off). Each
    term is logged per round as ``balance_loss`` / ``z_loss`` when its coefficient is on."""

    balance: float = at_least(0, 0.0)  # coefficient of the Switch load-balancing loss
    z: float = at_least(0, 0.0)  # coefficient of the ST-MoE router z-loss

    @property
    def active(self) -> bool:
        return self.balance > 0 or self.z > 0


def routers(model: nn.Module) -> list[tuple[nn.Module, int, int]]:
    """(router module, number of experts, top-k) of every MoE block: a module holding a
    ``gate`` router beside its :class:`SplitExperts`."""
    found = []
    for module in model.modules():
        experts, gate = getattr(module, "experts", None), getattr(module, "gate", None)
        if isinstance(experts, SplitExperts) and isinstance(gate, nn.Module):
            found.append((gate, len(experts), int(gate.top_k)))
    return found


class RouterLogits:
    """``with RouterLogits(model) as logits: model(...)`` — ``logits.layers`` then holds each
    MoE layer's router logits (tokens × experts) from that forward, in layer order."""

    def __init__(self, model: nn.Module) -> None:
        self._routers = routers(model)
        self.layers: list[torch.Tensor] = []
        self._handles: list[Any] = []

    @property
    def found(self) -> bool:
        """Whether the model has any MoE router (a dense model has none)."""
        return bool(self._routers)

    def __enter__(self) -> RouterLogits:
        self.layers = []
        def keep(_module: nn.Module, _inputs: Any, output: Any) -> None:
            # transformers' routers return (router_logits, top-k weights, top-k indices)
            self.layers.append(output[0] if isinstance(output, tuple) else output)

        self._handles = [gate.register_forward_hook(keep) for gate, _, _ in self._routers]
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def balance_loss(self) -> torch.Tensor:
        """The Switch load-balancing loss over the captured layers (top-k when balanced:
        transformers counts each token's k assignments)."""
        from transformers.models.olmoe.modeling_olmoe import load_balancing_loss_func

        _, experts, top_k = self._routers[0]
        return load_balancing_loss_func(tuple(self.layers), experts, top_k)

    def z_loss(self) -> torch.Tensor:
        """ST-MoE's router z-loss, averaged over the captured layers."""
        terms = [torch.logsumexp(z.float(), dim=-1).square().mean() for z in self.layers]
        return torch.stack(terms).mean()
