"""``backend: ray`` — clients hosted in groups on ClientActors, messages routed by a
Coordinator actor. The driver only orchestrates phases and collects small statistics."""

from __future__ import annotations

import math
import os

import numpy as np
import ray

from decent.core.stats import Stat
from decent.network.router import RoundTraffic
from decent.platform.config import RayConfig, RunConfig
from decent.platform.evaluation import combine, mean_model
from decent.platform.plan import RunPlan, build_plan

# Embedded (laptop) Ray: keep its traffic on 127.0.0.1, send no usage statistics, and do
# not turn on token auth (which would also write ~/.ray/auth_token and so switch auth on
# for every later `ray start` on this machine). Never applied when joining a cluster.
LOCAL_RAY_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "disabled",
}


def connect(rc: RayConfig) -> bool:
    """Attach to Ray; True if this call started it (and so should shut it down).

    With no address and no ``RAY_ADDRESS`` (which ``ray job submit`` sets) an embedded
    single-machine Ray is started, without dashboard."""
    if ray.is_initialized():
        return False
    address = rc.address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address)
        return True
    for key, value in LOCAL_RAY_ENV.items():
        os.environ.setdefault(key, value)
    ray.init(
        num_cpus=rc.num_cpus or os.cpu_count(),
        include_dashboard=False,
        object_store_memory=rc.object_store_mb * 2**20,
    )
    return True


def placement(n: int, clients_per_actor: int) -> list[list[int]]:
    """Contiguous groups of clients, one per actor."""
    actors = math.ceil(n / clients_per_actor)
    return [list(range(a * clients_per_actor, min(n, (a + 1) * clients_per_actor)))
            for a in range(actors)]


class RayBackend:
    def __init__(self, cfg: RunConfig, plan: RunPlan | None = None) -> None:
        from decent.platform.ray_backend.client_actor import ClientActor
        from decent.platform.ray_backend.coordinator import Coordinator

        self.cfg = cfg
        self.strategy = (plan or build_plan(cfg)).strategy  # the driver needs its phases
        self.started_ray = connect(cfg.ray)
        self.groups = placement(cfg.n, cfg.ray.clients_per_actor)
        self.coordinator = Coordinator.remote(cfg, self.groups)
        rc = cfg.ray
        self.actors = [
            ClientActor.options(num_cpus=rc.num_cpus_per_actor, num_gpus=rc.num_gpus_per_actor)
            .remote(cfg, cids, self.coordinator, rc.num_gpus_per_actor > 0)
            for cids in self.groups
        ]
        try:
            ray.get([a.ready.remote() for a in self.actors])  # surface build errors now
        except Exception:
            self.close()
            raise
        self._inboxes: list[ray.ObjectRef | None] = [None] * len(self.actors)
        self.max_edge_bytes_total = 0

    def run_round(self, round_: int) -> tuple[dict[int, dict[str, Stat]], RoundTraffic]:
        stats: dict[int, dict[str, Stat]] = {}
        for step, phase in enumerate(self.strategy.phases(round_)):
            calls = [a.run_phase.remote(round_, step, phase, inbox)
                     for a, inbox in zip(self.actors, self._inboxes, strict=True)]
            for group_stats in ray.get(calls):
                for cid, s in group_stats.items():
                    stats.setdefault(cid, {}).update(s)
            self._inboxes = ray.get(self.coordinator.advance.remote())
        traffic, self.max_edge_bytes_total = ray.get(self.coordinator.end_round.remote())
        return stats, traffic

    def evaluate(self, per_client: bool) -> dict[str, float]:
        mean = mean_model(ray.get([a.param_sum.remote() for a in self.actors]), self.cfg.n)
        mean_ref = ray.put(mean)
        reports = ray.get([a.evaluate.remote(mean_ref, i == 0, per_client)
                           for i, a in enumerate(self.actors)])
        return combine(reports)

    def client_vectors(self) -> dict[int, np.ndarray]:
        out: dict[int, np.ndarray] = {}
        for part in ray.get([a.client_vectors.remote() for a in self.actors]):
            out.update(part)
        return out

    def close(self) -> None:
        for actor in self.actors:
            ray.kill(actor)
        ray.kill(self.coordinator)
        self.actors = []
        if self.started_ray:
            ray.shutdown()
            self.started_ray = False
