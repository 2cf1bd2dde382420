"""The dtypes a strategy may send dense tensors in, as a config field."""

from __future__ import annotations

from typing import Any

import torch

from decent.core.schema import one_of

# bfloat16 halves the bytes of a dense model on the wire (2·d instead of 4·d).
WIRE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def wire_dtype_field(default: str = "float32") -> Any:
    """A config field choosing a key of :data:`WIRE_DTYPES`: the dtype a method casts its
    dense tensors to for the wire (``params.snapshot(model, WIRE_DTYPES[cfg.wire_dtype])``)."""
    return one_of(tuple(WIRE_DTYPES), default)
