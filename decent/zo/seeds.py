"""Message seeds: drawn from a client's own generator, never from torch's global one."""

from __future__ import annotations

import torch

SEED_SPACE = 2**62  # seeds are drawn uniformly below this (they travel as 8 bytes)


def draw_seed(generator: torch.Generator) -> int:
    return int(torch.randint(SEED_SPACE, (1,), generator=generator))
