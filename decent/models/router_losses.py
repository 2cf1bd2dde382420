"""The router's auxiliary losses of a mixture-of-experts model, read off any forward pass.

MoE pretraining (OLMoE, Muennighoff et al., 2024; SPES) adds two terms to the
cross-entropy. Both are computed here as SPES's authors' trainer computes them
(zjr2000/SPES, ``spes/train.py`` L889–L910, with the megablocks 0.7.0 that its
``pyproject.toml`` pins: ``megablocks/layers/moe.py`` ``batched_load_balancing_loss`` and
``megablocks/layers/router.py`` ``batched_router_zloss``):

* the **load-balancing loss** of Switch Transformers (Fedus et al., 2022) in megablocks'
  form: over the L MoE layers of one forward pass of T tokens, E experts, top-k routing,

      E / (L · T · k) · Σ_l Σ_e c_{l,e} · P_{l,e}  =  mean_l  E · Σ_e f_{l,e} · P_{l,e},

  with c_{l,e} the number of layer l's top-k assignments that went to expert e (a count:
  no gradient), f_{l,e} = c_{l,e} / (T · k) its share of the T · k assignments and P_{l,e}
  expert e's router probability averaged over the tokens. Each layer is balanced on its
  own and the layers are **averaged**; dividing by k makes it exactly 1 at perfect balance
  for any k (OLMoE's coefficient: 0.01). transformers' ``load_balancing_loss_func``
  differs twice: it pools the layers' counts and probabilities before the product, and
  it does not divide by k (2 at balance for top-2);
* the **router z-loss** of ST-MoE (Zoph et al., 2022): per layer the mean over the tokens
  of (log Σ_e exp z_e)², which keeps router logits small, **summed** over the layers (the
  trainer's ``batched_router_zloss(...).sum()``; OLMoE's coefficient: 0.001).

The authors' trainer takes both per micro-batch, i.e. over the tokens of one forward pass,
as here. (Their repository also carries a "decayed" load-balancing loss,
``spes/decayed_load_balance_loss.py``, that down-weights the experts a node trains; it is
switched on only by ``spes_config.using_decayed_aux_loss``, which their configs leave off.)

:class:`RouterLogits` collects the logits with forward hooks on each MoE block's router,
so the task's own loss (a plain forward) needs no change and dense models cost nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

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


def _wide(logits: torch.Tensor) -> torch.Tensor:
    """The logits in at least float32: a bf16 / fp16 router's losses are taken in float32
    (what megablocks' optional ``moe_lbl_in_fp32`` / ``moe_zloss_in_fp32`` do: a matter of
    precision, the definition is the same), float64 stays float64."""
    return logits.to(torch.promote_types(logits.dtype, torch.float32))


def top_k_choice(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """The experts a softmax top-k router picks for each token (tokens × k), for routers
    that do not report their picks."""
    with torch.no_grad():
        return torch.topk(torch.softmax(_wide(logits), dim=-1), top_k, dim=-1).indices


def balance_loss(layers: Sequence[torch.Tensor], chosen: Sequence[torch.Tensor]) -> torch.Tensor:
    """megablocks' load-balancing loss: the mean over layers of E · Σ_e f_e · P_e, with f_e
    the share of the layer's top-k assignments (``chosen``, tokens × k) that went to e and
    P_e e's mean router probability over the tokens of its ``layers`` logits (tokens × E).
    Exactly 1 when routing is balanced."""
    terms = []
    for logits, picks in zip(layers, chosen, strict=True):
        probs = torch.softmax(_wide(logits), dim=-1).reshape(-1, logits.shape[-1])
        experts = probs.shape[-1]
        # counts of the T·k assignments: the router's discrete choice carries no gradient,
        # as megablocks' histogram of the top-k expert ids
        counts = F.one_hot(picks.reshape(-1).long(), experts).sum(0).to(probs.dtype)
        share = counts / picks.numel()
        terms.append(experts * torch.dot(share, probs.mean(0)))
    return torch.stack(terms).mean()


def router_z_loss(layers: Sequence[torch.Tensor]) -> torch.Tensor:
    """ST-MoE's router z-loss: each layer's mean over tokens of logsumexp(logits)², summed
    over the layers."""
    terms = [torch.logsumexp(_wide(z), dim=-1).square().mean() for z in layers]
    return torch.stack(terms).sum()


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
    MoE layer's router logits (tokens × experts) from that forward, in layer order, and
    ``logits.chosen`` the experts each router picked (tokens × k)."""

    def __init__(self, model: nn.Module) -> None:
        self._routers = routers(model)
        self.layers: list[torch.Tensor] = []
        self.chosen: list[torch.Tensor] = []
        self._handles: list[Any] = []

    @property
    def found(self) -> bool:
        """Whether the model has any MoE router (a dense model has none)."""
        return bool(self._routers)

    def _keeper(self, top_k: int) -> Any:
        def keep(_module: nn.Module, _inputs: Any, output: Any) -> None:
            # transformers' routers return (router_logits, top-k weights, top-k indices);
            # the balance counts the router's own picks, so a tie broken one way in the
            # forward is counted the same way
            logits = output[0] if isinstance(output, tuple) else output
            picks = output[2] if isinstance(output, tuple) and len(output) > 2 else None
            if picks is None or picks.is_floating_point():
                picks = top_k_choice(logits, top_k)
            self.layers.append(logits)
            self.chosen.append(picks)

        return keep

    def __enter__(self) -> RouterLogits:
        self.layers, self.chosen = [], []
        self._handles = [gate.register_forward_hook(self._keeper(top_k))
                         for gate, _, top_k in self._routers]
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def balance_loss(self) -> torch.Tensor:
        """megablocks' load-balancing loss over the captured layers (1 when balanced)."""
        return balance_loss(self.layers, self.chosen)

    def z_loss(self) -> torch.Tensor:
        """ST-MoE's router z-loss, summed over the captured layers."""
        return router_z_loss(self.layers)
