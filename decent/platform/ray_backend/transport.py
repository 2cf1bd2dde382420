"""Moving message payloads between actors through Ray's object store.

Tensors are turned into numpy arrays before ``ray.put``: numpy travels zero-copy through
the object store (measured ~6× faster than torch tensors at 50 MB). bfloat16, which numpy
lacks, travels as its raw 16-bit pattern. Payloads of at least ``INLINE_BYTES`` are put
by the sender and only their references go to the driver, which never copies them;
smaller ones (seeds, scalars) ride inline in the message.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import ray
import torch

from decent.core.messages import Declared, Message

INLINE_BYTES = 64 * 1024


@dataclass(frozen=True)
class EncodedTensor:
    array: np.ndarray
    dtype: str  # torch dtype name, e.g. "float32", "bfloat16"


def encode(payload: Any) -> Any:
    """Replace every tensor in ``payload`` by a numpy-backed :class:`EncodedTensor`."""
    if isinstance(payload, torch.Tensor):
        t = payload.detach().to("cpu").contiguous()
        dtype = str(t.dtype).removeprefix("torch.")
        array = t.view(torch.int16).numpy() if t.dtype == torch.bfloat16 else t.numpy()
        return EncodedTensor(array, dtype)
    if isinstance(payload, dict):
        return {k: encode(v) for k, v in payload.items()}
    if isinstance(payload, (list, tuple)):
        return type(payload)(encode(v) for v in payload)
    if isinstance(payload, Declared):
        return Declared(encode(payload.payload), payload.nbytes)
    return payload


def decode(payload: Any, device: torch.device) -> Any:
    """Inverse of :func:`encode`: fresh, writable tensors on ``device``."""
    if isinstance(payload, EncodedTensor):
        t = torch.from_numpy(payload.array.copy())  # object-store arrays are read-only
        if payload.dtype == "bfloat16":
            t = t.view(torch.bfloat16)
        return t.to(device)
    if isinstance(payload, dict):
        return {k: decode(v, device) for k, v in payload.items()}
    if isinstance(payload, (list, tuple)):
        return type(payload)(decode(v, device) for v in payload)
    if isinstance(payload, Declared):
        return Declared(decode(payload.payload, device), payload.nbytes)
    return payload


def view(payload: EncodedTensor) -> torch.Tensor:
    """A CPU tensor over ``payload``'s memory, without a copy: for arrays mapped read-only
    from the object store that nobody writes (shared frozen weights)."""
    with warnings.catch_warnings():  # torch warns that the array is not writable
        warnings.simplefilter("ignore", UserWarning)
        t = torch.from_numpy(payload.array)
    return t.view(torch.bfloat16) if payload.dtype == "bfloat16" else t


def send(messages: list[Message]) -> list[Message]:
    """Messages ready for the driver's router: large payloads replaced by object refs."""
    out = []
    for msg in messages:
        payload = encode(msg.payload)
        if msg.nbytes >= INLINE_BYTES:
            payload = ray.put(payload)
        out.append(replace(msg, payload=payload))
    return out


def receive(inboxes: dict[int, list[Message]], device: torch.device) -> dict[int, list[Message]]:
    """Fetch every referenced payload of an inbox bundle (one ``ray.get``) and decode."""
    refs = [m.payload for msgs in inboxes.values() for m in msgs
            if isinstance(m.payload, ray.ObjectRef)]
    fetched = dict(zip(refs, ray.get(refs), strict=True)) if refs else {}
    return {
        cid: [
            replace(m, payload=decode(fetched.get(m.payload, m.payload)
                                      if isinstance(m.payload, ray.ObjectRef) else m.payload,
                                      device))
            for m in msgs
        ]
        for cid, msgs in inboxes.items()
    }
