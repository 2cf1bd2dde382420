"""``backend: local`` — every client in one process, in sequence, with an in-process
router. Same strategy code and same message path (sizes, edge checks, inbox order) as
on Ray; used by algorithm tests and small experiments."""

from __future__ import annotations

import numpy as np

from decent.core.stats import Stat
from decent.network.router import RoundTraffic, Router
from decent.platform.config import RunConfig
from decent.platform.evaluation import combine, mean_model
from decent.platform.group import ClientGroup, resolve_device
from decent.platform.plan import RunPlan, build_plan


class LocalBackend:
    def __init__(self, cfg: RunConfig, plan: RunPlan | None = None) -> None:
        self.cfg = cfg
        plan = plan or build_plan(cfg)
        self.group = ClientGroup(cfg, list(range(cfg.n)), resolve_device(cfg), plan)
        self.strategy = self.group.strategy
        self.router = Router(plan.topology, self.strategy.name, plan.network, plan.wire_faults)

    def run_round(self, round_: int) -> tuple[dict[int, dict[str, Stat]], RoundTraffic]:
        for step, phase in enumerate(self.strategy.phases(round_)):
            inboxes = self.router.take(self.group.cids)
            outgoing, compute = self.group.run_phase(round_, step, phase, inboxes)
            self.router.post(round_, phase, outgoing, compute)
            self.router.advance()
        return self.group.pop_stats(), self.router.end_round()

    def evaluate(self, per_client: bool) -> dict[str, float]:
        mean = mean_model([self.group.param_sum()], self.cfg.n)
        return combine([self.group.evaluate(mean, gmp=True, per_client=per_client)])

    def client_vectors(self) -> dict[int, np.ndarray]:
        return self.group.client_vectors()

    @property
    def max_edge_bytes_total(self) -> int:
        return self.router.max_edge_bytes_total

    def close(self) -> None:
        pass
