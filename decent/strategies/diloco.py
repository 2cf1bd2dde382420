"""DiLoCo — distributed low-communication training (Douillard et al., 2023).

FedAvg's round with the DiLoCo paper's optimisers: each worker runs H inner AdamW steps
from the global model (its AdamW state persists across rounds), uploads the
pseudo-gradient Δ_i = θ − θ_i, and the server (vertex 0 of a star) sets the mean Δ as the
gradient of θ for one outer Nesterov SGD step (lr 0.7, momentum 0.9), then broadcasts θ.
``outer_lr=1, outer_momentum=0, outer_nesterov=false`` is FedAvg.

Defaults are the paper's: inner AdamW, lr 4e-4, weight decay 0.1; H = 500 there, 50 here
so that a CPU-sized run still has several outer steps (set ``local_steps`` to taste).
"""

from __future__ import annotations

from dataclasses import dataclass

from decent.core.schema import at_least, in_range, one_of, positive
from decent.strategies.fedavg import FedAvg, FedAvgConfig
from decent.strategies.local_training import OPTIMIZERS


@dataclass
class DiLoCoConfig(FedAvgConfig):
    name: str = "diloco"
    local_steps: int = at_least(1, 50)  # H: inner steps between outer steps (DiLoCo's 500 at scale)
    optimizer: str = one_of(OPTIMIZERS, "adamw")  # the inner optimiser (DiLoCo: AdamW)
    lr: float = positive(4e-4)  # the inner learning rate
    weight_decay: float = at_least(0, 0.1)  # the inner AdamW's weight decay (DiLoCo's 0.1)
    outer_lr: float = positive(0.7)  # the outer SGD learning rate (DiLoCo's 0.7)
    # the outer SGD momentum (DiLoCo's 0.9)
    outer_momentum: float = in_range(0.9, 0, 1, hi_open=True)
    outer_nesterov: bool = True  # Nesterov momentum for the outer step (DiLoCo's)


class DiLoCo(FedAvg):
    name = "diloco"
    Config = DiLoCoConfig
