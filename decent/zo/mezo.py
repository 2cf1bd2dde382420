"""Dense MeZO perturbations (Malladi et al., 2023, Algorithm 1).

z ~ N(0, I_d) is never stored: it is regenerated tensor by tensor from one
``torch.Generator`` seeded with the message seed, so a seed (8 bytes) stands for a
d-dimensional direction. The draws never touch torch's global RNG. z is reproducible on
the same device type (CPU and CUDA generators differ), so all clients of a run use one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


def zo_generator(seed: int, device: torch.device | str) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def gaussians(tensors: Sequence[torch.Tensor], seed: int) -> list[torch.Tensor]:
    """The z of :func:`add_gaussian` for ``tensors`` (one per tensor, in their order)."""
    if not tensors:
        return []
    g = zo_generator(seed, tensors[0].device)
    return [torch.randn(t.shape, generator=g, device=t.device, dtype=t.dtype)
            for t in tensors]


@torch.no_grad()
def add_gaussian(tensors: Sequence[torch.Tensor], seed: int, scale: float) -> None:
    """In place ``t += scale · z`` with z drawn from ``seed`` in the order of ``tensors``."""
    if not tensors:
        return
    g = zo_generator(seed, tensors[0].device)
    for t in tensors:
        t.add_(torch.randn(t.shape, generator=g, device=t.device, dtype=t.dtype), alpha=scale)


@torch.no_grad()
def two_point(tensors: Sequence[torch.Tensor], loss_fn: Callable[[], float], seed: int,
              eps: float) -> float:
    """α = (ℓ(θ+εz) − ℓ(θ−εz)) / 2ε with in-place perturbation (+ε, −2ε, +ε).

    MeZO's memory trade: θ is restored only up to float rounding, and nothing but θ is
    held in memory."""
    add_gaussian(tensors, seed, eps)
    plus = loss_fn()
    add_gaussian(tensors, seed, -2 * eps)
    minus = loss_fn()
    add_gaussian(tensors, seed, eps)
    return (plus - minus) / (2 * eps)


def apply_updates(tensors: Sequence[torch.Tensor], updates: Sequence[tuple[int, float]]) -> None:
    """θ ← θ − c·z(s) for each ``(s, c)`` in order: O(d) per update."""
    for seed, coef in updates:
        add_gaussian(tensors, seed, -coef)
