"""The models ``decent run`` can name in ``model.name``."""

from __future__ import annotations

from decent.core.registry import Registry
from decent.models.causal_lm import CausalLMConfig, build_causal_lm
from decent.models.cnn import CNNConfig, build_cnn
from decent.models.mlp import MLPConfig, build_mlp
from decent.models.reward_model import RewardModelConfig, build_reward_model

MODELS = Registry("model")
MODELS.register("mlp", MLPConfig, build_mlp)
MODELS.register("cnn", CNNConfig, build_cnn)
MODELS.register("causal_lm", CausalLMConfig, build_causal_lm)
MODELS.register("reward_model", RewardModelConfig, build_reward_model)
