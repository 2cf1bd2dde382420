"""Commit-then-reveal for payloads: c = SHA3-256(payload ‖ nonce).

A sender publishes the commitment one phase before the payload itself; the receiver
recomputes the hash of what arrives and drops a payload that does not match (DSO's check
against clients that change their gradient after seeing others'). The hash covers a
canonical byte encoding of the payload: every tensor leaf, in sorted-key order, as its
dtype name, shape and raw bytes, so any change of a single bit in a value, a shape or a
dtype changes the digest. The nonce (16 bytes drawn by the sender) keeps equal payloads
from having equal, guessable commitments.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import torch

DIGEST_BYTES = 32  # SHA3-256
NONCE_BYTES = 16


def _feed(h: Any, payload: Any) -> None:
    if isinstance(payload, torch.Tensor):
        payload = payload.detach().cpu().contiguous()
        h.update(f"{payload.dtype}{tuple(payload.shape)}".encode())
        # bit patterns, not values: view as bytes so -0.0 ≠ 0.0 and NaNs are exact
        h.update(payload.reshape(-1).view(torch.uint8).numpy().tobytes())
    elif isinstance(payload, np.ndarray):
        h.update(f"{payload.dtype}{payload.shape}".encode())
        h.update(np.ascontiguousarray(payload).tobytes())
    elif isinstance(payload, dict):
        for key in sorted(payload):
            h.update(repr(key).encode())
            _feed(h, payload[key])
    elif isinstance(payload, (list, tuple)):
        h.update(f"{type(payload).__name__}{len(payload)}".encode())
        for item in payload:
            _feed(h, item)
    else:
        h.update(repr(payload).encode())


def commitment(payload: Any, nonce: bytes) -> bytes:
    """SHA3-256 of the payload's canonical bytes followed by the nonce."""
    h = hashlib.sha3_256()
    _feed(h, payload)
    h.update(nonce)
    return h.digest()


def verifies(payload: Any, nonce: bytes, digest: bytes) -> bool:
    return commitment(payload, nonce) == digest


def draw_nonce(generator: torch.Generator) -> bytes:
    """A nonce from the sender's own generator (reproducible runs, fresh per message)."""
    return torch.randint(0, 256, (NONCE_BYTES,), generator=generator,
                         dtype=torch.uint8).numpy().tobytes()
