"""What a run's numbers depend on besides its config: the library versions and the CPU
kernels torch picked.

Torch chooses its CPU kernels by the machine's vector instructions (AVX2, AVX-512, ...).
The kernels sum in different orders, so the same config gives the same rows on two
machines only to the last bits unless both use the same kernels. Each stretch of a run
(``segments.json``) keeps the environment of the process that drove it, so that
``decent verify --rerun`` can run a record again with the kernels it was made with
(``ATEN_CPU_CAPABILITY``, which torch reads once, before its first kernel: hence a fresh
process). Ray workers on other nodes may differ from the driver; this is the driver's."""

from __future__ import annotations

import importlib.metadata
import os
import platform
from typing import Any

# torch's names for its CPU kernel sets, as ATEN_CPU_CAPABILITY takes them
KERNELS_VARIABLE = "ATEN_CPU_CAPABILITY"
LIBRARIES = ("torch", "transformers", "peft", "numpy")


def cpu_kernels() -> str:
    """The CPU kernel set torch uses in this process, in ATEN_CPU_CAPABILITY's spelling
    (``avx2``, ``avx512``, ``default``, ...)."""
    import torch

    return str(torch.backends.cpu.get_cpu_capability()).lower()


def describe() -> dict[str, Any]:
    """This process's environment, as a stretch of a run records it."""
    versions: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return {"python": platform.python_version(), "machine": platform.machine(),
            "cpu_kernels": cpu_kernels(), **versions}


def recorded_kernels(segments: list[dict[str, Any]]) -> str | None:
    """The CPU kernels a record's rows were made with: its first stretch's (the rows a
    re-run compares start there), or None for a record made before kernels were kept."""
    first = segments[0] if segments and isinstance(segments[0], dict) else {}
    env = first.get("environment")
    kernels = env.get("cpu_kernels") if isinstance(env, dict) else None
    return kernels if isinstance(kernels, str) else None


def with_kernels(kernels: str) -> dict[str, str]:
    """This process's environment variables, with torch told to use ``kernels``."""
    return {**os.environ, KERNELS_VARIABLE: kernels}
