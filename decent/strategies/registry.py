"""The strategies ``decent run`` can name in ``strategy.name``."""

from __future__ import annotations

from decent.platform.registry import Registry
from decent.strategies.dsgd import DSGD
from decent.strategies.fedavg import FedAvg

STRATEGIES = Registry("strategy")
for _cls in (DSGD, FedAvg):
    STRATEGIES.register(_cls.name, _cls.Config, _cls)
