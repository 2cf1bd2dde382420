"""The tasks ``decent run`` can name in ``task.name``."""

from __future__ import annotations

from decent.core.registry import Registry
from decent.tasks.catalog import CLASSIFICATION_TASKS
from decent.tasks.cifar10 import Cifar10Config, Cifar10Task
from decent.tasks.digits import DigitsConfig, DigitsTask
from decent.tasks.language_modeling import LanguageModelingConfig, LanguageModelingTask
from decent.tasks.linear_regression import LinearRegressionConfig, LinearRegressionTask
from decent.tasks.preference import PreferenceConfig, PreferenceTask
from decent.tasks.prompted import PromptedConfig, PromptedTask
from decent.tasks.record import RecordConfig, RecordTask

TASKS = Registry("task")
TASKS.register("digits", DigitsConfig, DigitsTask)
TASKS.register("cifar10", Cifar10Config, Cifar10Task)
TASKS.register("lm", LanguageModelingConfig, LanguageModelingTask)
TASKS.register("linear_regression", LinearRegressionConfig, LinearRegressionTask)
TASKS.register("preference", PreferenceConfig, PreferenceTask)
TASKS.register("record", RecordConfig, RecordTask)
for _name in CLASSIFICATION_TASKS:  # every prompted classification task of the catalog
    TASKS.register(_name, PromptedConfig, PromptedTask)
