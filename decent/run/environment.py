"""What a run's numbers depend on besides its config: its fingerprint.

The same config and seed give the same counts, bytes, messages and simulated clock on any
machine; its float values (losses, accuracies, distances) are the same to the last bit
only where the arithmetic is done the same way. That is decided by the CPU (its model:
MKL and oneDNN dispatch on it; its vector instructions: torch picks its kernels by them),
by the builds of torch, numpy and their BLAS, by how many threads split a sum (intra-op)
or run ops side by side (inter-op), by the device and by the settings and variables that
switch algorithms (deterministic algorithms, TF32, ``MKL_CBWR``, ...).

Each stretch of a run (``segments.json``) keeps the fingerprint of the process that drove
it, with the thread count its clients were set to (``torch_threads``: every client group
sets it, so a shell's ``OMP_NUM_THREADS`` changes nothing). ``decent verify --rerun``
compares a record's fingerprint with its own (:func:`differing`): exact where they match,
within the record's measured tolerance where they do not (:mod:`decent.run.tolerance`).
``ATEN_CPU_CAPABILITY`` tells torch which kernels to use, read once before its first
kernel: hence a fresh process for a re-run with the record's. Ray workers on other nodes
may differ from the driver; this is the driver's."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
from pathlib import Path
from typing import Any

# torch's names for its CPU kernel sets, as ATEN_CPU_CAPABILITY takes them
KERNELS_VARIABLE = "ATEN_CPU_CAPABILITY"
LIBRARIES = ("torch", "transformers", "peft", "numpy")
# the CPU flags that change which kernels MKL, oneDNN and torch run (not the whole list:
# flags such as the cache or virtualisation ones differ between machines whose arithmetic
# is the same)
ARITHMETIC_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw",
                    "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile",
                    "amx_bf16", "amx_int8", "asimd", "sve", "sve2")
# variables that switch an algorithm or its dispatch (read by MKL, oneDNN, torch, cuBLAS)
# (ATEN_CPU_CAPABILITY's effect is cpu_kernels: a re-run told the record's kernels by it
# runs the record's arithmetic)
ARITHMETIC_VARIABLES = ("MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS",
                        "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "CUBLAS_WORKSPACE_CONFIG",
                        "NVIDIA_TF32_OVERRIDE", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE")
# The fields compared, in the order a re-run names them. Everything else a stretch keeps
# (its python version, its start) is recorded, not compared.
FINGERPRINT = ("machine", "cpu_model", "cpu_flags", "cpu_kernels", "torch", "torch_build",
               "numpy", "numpy_blas", "transformers", "peft", "intra_op_threads",
               "inter_op_threads", "device", "gpu", "cuda", "deterministic",
               "float32_matmul_precision", "variables")


def cpu_kernels() -> str:
    """The CPU kernel set torch uses in this process, in ATEN_CPU_CAPABILITY's spelling
    (``avx2``, ``avx512``, ``default``, ...)."""
    import torch

    return str(torch.backends.cpu.get_cpu_capability()).lower()


def cpu_info(text: str | None = None) -> tuple[str, list[str]]:
    """The CPU's model name and those of its flags that change arithmetic, from
    ``/proc/cpuinfo`` (x86 ``model name``/``flags``, Arm ``CPU part``/``Features``); the
    platform's processor string and no flags where there is none."""
    if text is None:
        try:
            text = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            text = ""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    model = fields.get("model name") or fields.get("CPU part") or platform.processor()
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    return model or "unknown", [f for f in ARITHMETIC_FLAGS if f in flags]


def torch_build() -> str:
    """torch's build, as a short digest of ``torch.__config__.show()`` (its compiler, MKL,
    oneDNN and OpenMP versions, build flags) without the line that names the CPU kernels
    in use (``cpu_kernels`` says that)."""
    import torch

    shown = "\n".join(line for line in torch.__config__.show().splitlines()
                      if "CPU capability usage" not in line)
    return hashlib.sha256(shown.encode()).hexdigest()[:16]


def numpy_blas() -> str | None:
    """numpy's BLAS library and version (its build configuration)."""
    import numpy

    try:
        blas = numpy.show_config(mode="dicts")["Build Dependencies"]["blas"]
    except (KeyError, TypeError, ValueError):
        return None
    return f"{blas.get('name')} {blas.get('version')}"


def gpu() -> tuple[str | None, str | None]:
    """The first CUDA device's name and torch's CUDA version (None, None without one)."""
    import torch

    if not torch.cuda.is_available():
        return None, None
    return torch.cuda.get_device_name(0), torch.version.cuda


def describe(torch_threads: int | None = None, device: str | None = None) -> dict[str, Any]:
    """This process's environment as a stretch of a run records it: the library versions,
    the CPU kernels and the whole fingerprint. ``torch_threads`` is the intra-op thread
    count the run's clients were set to (default: this process's); ``device`` the device
    its clients compute on (``cpu`` or ``cuda``)."""
    import torch

    versions: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    model, flags = cpu_info()
    gpu_name, cuda = gpu()
    return {
        "python": platform.python_version(), "machine": platform.machine(),
        "cpu_model": model, "cpu_flags": flags, "cpu_kernels": cpu_kernels(), **versions,
        "torch_build": torch_build(), "numpy_blas": numpy_blas(),
        "intra_op_threads": torch.get_num_threads() if torch_threads is None
        else torch_threads,
        "inter_op_threads": torch.get_num_interop_threads(),
        "device": device, "gpu": gpu_name, "cuda": cuda,
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "variables": {v: os.environ[v] for v in ARITHMETIC_VARIABLES if v in os.environ},
    }


def recorded_environment(segments: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The environment a record's rows were made in: its first stretch's (the rows a
    re-run compares start there), or None for a record made before it was kept."""
    first = segments[0] if segments and isinstance(segments[0], dict) else {}
    env = first.get("environment")
    return env if isinstance(env, dict) else None


def recorded_kernels(segments: list[dict[str, Any]]) -> str | None:
    """The CPU kernels a record's rows were made with, or None where it does not say."""
    kernels = (recorded_environment(segments) or {}).get("cpu_kernels")
    return kernels if isinstance(kernels, str) else None


def recorded_fingerprint(segments: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The record's whole fingerprint, or None for a record that keeps only part of it
    (made before it was kept whole: its versions and kernels alone cannot say the
    arithmetic was the same)."""
    env = recorded_environment(segments)
    if env is None or not all(key in env for key in FINGERPRINT):
        return None
    return {key: env[key] for key in FINGERPRINT}


def differing(recorded: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """The fingerprint fields whose values differ, in :data:`FINGERPRINT`'s order."""
    return [key for key in FINGERPRINT if recorded.get(key) != now.get(key)]


def with_kernels(kernels: str) -> dict[str, str]:
    """This process's environment variables, with torch told to use ``kernels``."""
    return {**os.environ, KERNELS_VARIABLE: kernels}

