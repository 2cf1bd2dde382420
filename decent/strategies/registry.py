"""The strategies ``decent run`` can name in ``strategy.name``."""

from __future__ import annotations

from decent.core.registry import Registry
from decent.strategies.choco import ChocoSGD
from decent.strategies.combo import Combo
from decent.strategies.diloco import DiLoCo
from decent.strategies.dsgd import DSGD
from decent.strategies.dso import DSO
from decent.strategies.dzsgd import DZSGD
from decent.strategies.fedavg import FedAvg
from decent.strategies.gasloc import GASLoC
from decent.strategies.mezo import MeZO
from decent.strategies.seed_gossip import SeedGossip
from decent.strategies.seedflood import SeedFlood
from decent.strategies.sgp import OSGP, SGP
from decent.strategies.spes import SPES

STRATEGIES = Registry("strategy")
for _cls in (DSGD, ChocoSGD, FedAvg, DiLoCo, GASLoC, SeedFlood, DZSGD, MeZO, SeedGossip,
             Combo, SPES, DSO, SGP, OSGP):
    STRATEGIES.register(_cls.name, _cls.Config, _cls)
