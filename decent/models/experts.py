"""Mixture-of-experts models with one module per expert.

transformers 5.x stores all experts of a layer in fused 3-D parameters, so no parameter
belongs to a single expert. :func:`split_experts` (applied by
:func:`decent.models.causal_lm.build_causal_lm` to every model) replaces those modules by
:class:`SplitExperts`, after which :func:`expert_parameter_names` can name each expert's
weights separately, which methods that place different experts on different nodes need.
"""

from __future__ import annotations

import torch
from torch import nn


class ExpertMLP(nn.Module):
    """One expert's gated MLP: ``down(act(gate(x)) * up(x))``."""

    def __init__(self, gate: nn.Linear, up: nn.Linear, down: nn.Linear, act_fn: nn.Module):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj, self.act_fn = gate, up, down, act_fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class SplitExperts(nn.ModuleList):
    """A drop-in for transformers' fused expert modules, with one submodule per expert.

    transformers 5.x stores all experts of a layer in two 3-D parameters (``gate_up_proj`` of
    shape experts × 2·intermediate × hidden and ``down_proj`` of shape experts × hidden ×
    intermediate), so no parameter belongs to a single expert. Here expert ``e`` owns
    ``experts.{e}.gate_proj/up_proj/down_proj.weight`` (the naming of transformers 4.x
    checkpoints). ``forward`` has the fused module's signature and computes the same sum:
    each token's output is the routing-weighted sum of its top-k experts' outputs.
    """

    def forward(
        self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
    ) -> torch.Tensor:
        out = torch.zeros_like(hidden_states)
        for e, expert in enumerate(self):
            token_idx, k_pos = torch.where(top_k_index == e)
            if token_idx.numel() == 0:
                continue
            y = expert(hidden_states[token_idx]) * top_k_weights[token_idx, k_pos, None]
            out.index_add_(0, token_idx, y.to(out.dtype))
        return out

    @classmethod
    def from_fused(cls, fused: nn.Module) -> SplitExperts:
        gate_up, down = fused.gate_up_proj, fused.down_proj
        n, two_i, hidden = gate_up.shape
        inter = two_i // 2
        if down.shape != (n, hidden, inter):
            raise ValueError(
                f"unexpected expert shapes {tuple(gate_up.shape)}, {tuple(down.shape)}"
            )

        def linear(weight: torch.Tensor) -> nn.Linear:
            # skip_init: no random init (it would advance the global generator) before the copy.
            layer = torch.nn.utils.skip_init(
                nn.Linear,
                weight.shape[1],
                weight.shape[0],
                bias=False,
                device=weight.device,
                dtype=weight.dtype,
            )
            with torch.no_grad():
                layer.weight.copy_(weight)
            layer.weight.requires_grad_(gate_up.requires_grad)
            return layer

        # The fused forward chunks linear(x, gate_up_proj[e]) in two: gate first, then up.
        return cls(
            ExpertMLP(
                linear(gate_up[e, :inter]),
                linear(gate_up[e, inter:]),
                linear(down[e]),
                fused.act_fn,
            )
            for e in range(n)
        )


# Fused expert classes whose forward is exactly "gate, up = chunk(x @ gate_up[e].T);
# down[e] @ (act(gate) * up)", weighted by the router, with no biases (as in transformers 5.x).
_FUSED_EXPERTS = frozenset(
    {"OlmoeExperts", "FlexOlmoExperts", "MixtralExperts", "Qwen2MoeExperts", "Qwen3MoeExperts"}
)


def split_experts(model: nn.Module) -> int:
    """Replace every known fused expert module by a :class:`SplitExperts`; returns how many.

    A no-op for dense models. The replaced model computes the same outputs (up to float
    rounding) but its state dict uses per-expert names, so save it with the platform's own
    checkpoints rather than ``save_pretrained``.
    """
    fused = [
        (name, module)
        for name, module in model.named_modules()
        if type(module).__name__ in _FUSED_EXPERTS
    ]
    for name, module in fused:
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name), child, SplitExperts.from_fused(module))
    return len(fused)


def _expert_of_parameter(model: nn.Module) -> dict[int, int]:
    """``id(parameter) -> expert index`` over all :class:`SplitExperts` in ``model``."""
    owner: dict[int, int] = {}
    for module in model.modules():
        if isinstance(module, SplitExperts):
            for e, expert in enumerate(module):
                for p in expert.parameters():
                    owner[id(p)] = e
        elif type(module).__name__ in _FUSED_EXPERTS:
            raise ValueError("the model has fused experts; call split_experts(model) first")
    return owner


def expert_parameter_names(model: nn.Module) -> dict[int, list[str]]:
    """Expert index → the names (as in ``model.named_parameters()``) of that expert's
    parameters in every layer; adapters inside an expert count as the expert's. Empty for a
    dense model."""
    owner = _expert_of_parameter(model)
    names: dict[int, list[str]] = {e: [] for e in sorted(set(owner.values()))}
    for name, p in model.named_parameters():
        if id(p) in owner:
            names[owner[id(p)]].append(name)
    return names


def shared_parameter_names(model: nn.Module) -> list[str]:
    """The parameters that belong to no expert: embeddings, attention, norms, routers, head."""
    owner = _expert_of_parameter(model)
    return [name for name, p in model.named_parameters() if id(p) not in owner]
