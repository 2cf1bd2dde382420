"""The tasks ``decent run`` can name in ``task.name``."""

from __future__ import annotations

from decent.platform.registry import Registry
from decent.tasks.digits import DigitsConfig, DigitsTask

TASKS = Registry("task")
TASKS.register("digits", DigitsConfig, DigitsTask)
