"""Low-rank adapters (LoRA) on a causal LM: their config section and wrapping a model.

peft is imported inside :func:`apply_lora`: the model registry imports the causal LM modules
for every run, and most runs never touch an LLM.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from torch import nn

from decent.core.errors import ConfigError
from decent.core.schema import at_least, in_range, text


@dataclass
class LoRAConfig:
    """Low-rank adapters on the attention projections.

    The defaults (rank 8, alpha 16, dropout 0.05 on ``q_proj`` and ``v_proj``) are the setting
    of the SeedFlood paper's LoRA experiments.
    """

    # train and send only LoRA adapters; the base weights stay frozen and shared
    enabled: bool = False
    r: int = at_least(1, 8)  # the adapters' rank
    alpha: int = at_least(1, 16)  # the adapters' scale is alpha / r
    dropout: float = in_range(0.05, 0, 1, hi_open=True)  # dropout on the adapters' input
    # the modules adapted (names as in the model)
    target_modules: list[str] = text(["q_proj", "v_proj"], nullable=False)

    def validate(self, prefix: str = "model.lora") -> None:
        if not self.target_modules:
            raise ConfigError(
                f"{prefix}.target_modules",
                "name at least one module to adapt, e.g. [q_proj, v_proj]",
            )


def apply_lora(model: nn.Module, lora: LoRAConfig, prefix: str = "model.lora",
               task_type: str = "CAUSAL_LM",
               modules_to_save: list[str] | None = None) -> nn.Module:
    """Wrap ``model`` with peft LoRA adapters; afterwards only adapter tensors (and the
    modules named in ``modules_to_save``, e.g. a reward model's head) are trainable.

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
        task_type=task_type,
        modules_to_save=modules_to_save,
    )
    try:
        with warnings.catch_warnings():
            # peft reads a transformers property that transformers 5.x deprecates; not ours to fix.
            warnings.filterwarnings("ignore", "`is_gradient_checkpointing`", FutureWarning)
            return get_peft_model(model, peft_config)
    except ValueError as err:  # e.g. a target that is not a layer type LoRA supports
        raise ConfigError(f"{prefix}.target_modules", str(err).splitlines()[0]) from None
