"""Compressing a whole update — a dict of named tensors — at the compressor's scope.

Per tensor (every compressor's default), each tensor is compressed on its own and the
payload is ``{name: payload}``. A Top-K compressor with ``scope: global`` treats the update
as one vector g ∈ R^d instead, the tensors flattened and concatenated in name order, as
DSO's Algorithm 1 writes it (TopK over g, then one INT8 quantisation of g[I]): the payload
is ``{WHOLE: payload}`` with indices into g, and one scale for the kept values.
"""

from __future__ import annotations

import torch

from decent.compression.base import Compressor, Payload
from decent.compression.topk import GLOBAL

# the key of the one payload of a whole-update compression (no parameter is named so)
WHOLE = "*"


def is_global(compressor: Compressor) -> bool:
    return getattr(compressor, "scope", None) == GLOBAL


def flatten(tensors: dict[str, torch.Tensor]) -> torch.Tensor:
    """The tensors as one vector, in name order (the order every client agrees on)."""
    return torch.cat([tensors[name].reshape(-1) for name in sorted(tensors)])


def split(vector: torch.Tensor, like: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """:func:`flatten` undone: ``vector`` cut into tensors shaped as ``like``'s."""
    out, at = {}, 0
    for name in sorted(like):
        n = like[name].numel()
        out[name] = vector[at:at + n].reshape(like[name].shape)
        at += n
    return out


def compress_tree(compressor: Compressor, tensors: dict[str, torch.Tensor],
                  importance: dict[str, torch.Tensor] | None = None
                  ) -> dict[str, Payload]:
    """The payloads of ``tensors``; ``importance`` (a Top-K compressor): rank entries by it
    rather than by magnitude (a tensor without one: by magnitude)."""
    def score(name: str) -> torch.Tensor | None:
        return None if importance is None or name not in importance else importance[name]

    if not is_global(compressor):
        return {name: compressor.compress(x) if score(name) is None
                else compressor.compress(x, score(name))  # type: ignore[call-arg]
                for name, x in tensors.items()}
    scores = None
    if importance is not None:
        scores = flatten({name: x.abs() if score(name) is None
                          else score(name).expand_as(x) for name, x in tensors.items()})
    whole = flatten(tensors)
    return {WHOLE: compressor.compress(whole) if scores is None
            else compressor.compress(whole, scores)}  # type: ignore[call-arg]


def decompress_tree(compressor: Compressor, payloads: dict[str, Payload],
                    like: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The dense tensors a receiver rebuilds, shaped as ``like``'s (other keys in
    ``payloads``, such as a strategy's own counters, are not read)."""
    if not is_global(compressor):
        return {name: compressor.decompress(payloads[name], t) for name, t in like.items()}
    whole = flatten(like)
    dense = split(compressor.decompress(payloads[WHOLE], whole), like)
    return {name: dense[name] for name in like}  # in like's order
