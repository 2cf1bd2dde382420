"""Reading and writing a model's trainable parameters as named tensors or one vector."""

from __future__ import annotations

import numpy as np
import torch


def trainable_params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The live trainable parameters by name (no copy)."""
    return {name: p for name, p in model.named_parameters() if p.requires_grad}


def snapshot(model: torch.nn.Module, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """A detached copy of the trainable parameters (optionally cast for the wire)."""
    return {
        name: p.detach().to(dtype=dtype or p.dtype, copy=True)
        for name, p in trainable_params(model).items()
    }


@torch.no_grad()
def load(model: torch.nn.Module, values: dict[str, torch.Tensor]) -> None:
    """Copy ``values`` into the model's trainable parameters in place."""
    live = trainable_params(model)
    for name, value in values.items():
        live[name].copy_(value)


def _params(model: torch.nn.Module, frozen: bool) -> dict[str, torch.Tensor]:
    """The trainable parameters, or with ``frozen`` every parameter, by name."""
    return dict(model.named_parameters()) if frozen else trainable_params(model)


def flat_vector(model: torch.nn.Module, frozen: bool = False) -> np.ndarray:
    """All trainable parameters (with ``frozen``: all parameters) as one float64 vector
    (for averages and distances)."""
    return torch.cat(
        [p.detach().reshape(-1).to("cpu", torch.float64)
         for p in _params(model, frozen).values()]
    ).numpy()


def flat_tensor(model: torch.nn.Module) -> torch.Tensor:
    """All trainable parameters as one new tensor at their dtype and device (what a
    method that cuts the model into segments sends from)."""
    return torch.cat([p.detach().reshape(-1) for p in trainable_params(model).values()])


@torch.no_grad()
def load_flat_tensor(model: torch.nn.Module, vector: torch.Tensor) -> None:
    """Inverse of :func:`flat_tensor`."""
    torch.nn.utils.vector_to_parameters(vector, list(trainable_params(model).values()))


def unflatten(model: torch.nn.Module, vector: np.ndarray,
              frozen: bool = False) -> dict[str, torch.Tensor]:
    """:func:`flat_vector`'s ``vector`` cut back into new tensors by name, at each
    parameter's shape and dtype (on the CPU)."""
    out, offset = {}, 0
    for name, p in _params(model, frozen).items():
        chunk = torch.tensor(vector[offset : offset + p.numel()])  # copies: may be read-only
        out[name] = chunk.reshape(p.shape).to(p.dtype)
        offset += p.numel()
    return out


@torch.no_grad()
def load_flat(model: torch.nn.Module, vector: np.ndarray, frozen: bool = False) -> None:
    """Inverse of :func:`flat_vector` (cast to each parameter's dtype)."""
    live = _params(model, frozen)
    for name, value in unflatten(model, vector, frozen).items():
        live[name].copy_(value)
