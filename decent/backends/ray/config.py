"""The ``ray`` section of a run config: how the Ray backend lays out and runs its actors,
and what a lost actor means to the run (:meth:`RayConfig.loss_policy`). Plain data: the
run config's schema names it, and nothing here imports Ray."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from decent.core.errors import ConfigError
from decent.core.schema import at_least, count_or, one_of, text

# Ray refuses an object store smaller than 75 MiB (OBJECT_STORE_MINIMUM_MEMORY_BYTES).
OBJECT_STORE_MIN_MB = 75


@dataclass(frozen=True)
class LossPolicy:
    """What a lost host means to a run: its clients crash and the run goes on without them
    (``churn``), or the run goes back to its last checkpoint with fresh hosts
    (``restart``), at most ``max_restarts`` times."""

    on_loss: str
    max_restarts: int = 0


@dataclass
class RayConfig:
    address: str | None = text()  # None: embedded Ray (or RAY_ADDRESS, set by `ray job submit`)
    # auto: as many actors as the cluster has CPUs (or GPU slots, with num_gpus_per_actor),
    # never more than clients, the clients split evenly; a number: that many per actor
    clients_per_actor: Any = count_or(("auto",), 1, "auto")
    # the actor slots `auto` spreads the clients over; None: the cluster's (a sweep sets
    # each trial's share of them, so trials that run at once fit side by side)
    actor_slots: int | None = at_least(1, None, nullable=True)
    # CPU actors of a language-model run map one copy of its frozen weights from the
    # object store instead of one each (they never change: a LoRA base, SubCGE's W)
    share_frozen: bool = True
    # estimate the memory per actor and per node before any actor starts (printed), and
    # refuse a run that cannot fit
    memory_plan: bool = True
    # what one node may use, in MB; None: the memory available when the run starts
    # (embedded Ray) or the smallest node's memory resource (a cluster)
    node_memory_mb: int | None = at_least(1, None, nullable=True)
    # on a cluster of several nodes, how the actors' placement group lays them out: one
    # bundle per actor, spread over the nodes (best effort), packed onto few, or strictly
    # one per node; a single node needs no placement group
    placement: str = one_of(("spread", "pack", "strict_spread"), "spread")
    # 0: no CPU reservation (fractions above the core count hang)
    num_cpus_per_actor: float = at_least(0, 0.0)
    num_gpus_per_actor: float = at_least(0, 0.0)  # > 0: the actor's clients run on cuda
    num_cpus: int | None = at_least(1, None, nullable=True)  # embedded Ray; default: all cores
    object_store_mb: int = at_least(OBJECT_STORE_MIN_MB, 512)  # embedded Ray only
    # an actor that dies: its clients crash and the run goes on without them (churn), or
    # the run goes back to its last checkpoint with fresh actors (restart)
    on_actor_death: str = one_of(("churn", "restart"), "churn")
    # how large payloads (≥ 64 KiB) move between actors: through the object store, or
    # with Ray Direct Transport (the sender keeps them; NCCL between GPU actors, Gloo
    # between CPU actors); auto: RDT on GPU actors, the object store on CPU actors
    payload_transport: str = one_of(("auto", "object_store", "rdt"), "auto")
    # restarts from the last checkpoint allowed before the run fails (on_actor_death=restart)
    max_restarts: int = at_least(0, 3)
    # on a Ray the run did not start (a notebook, a script running several configs), hand
    # the actor processes back at the end for the next run to build its clients in,
    # instead of starting new ones (~2-3 s of CPU each); false: fresh processes every run
    reuse_actors: bool = True

    def loss_policy(self) -> LossPolicy:
        return LossPolicy(self.on_actor_death, self.max_restarts)

    def check_device(self, device: str) -> None:
        """``device=cuda`` needs GPUs reserved for the actors: without them Ray hides every
        GPU from an actor and its clients could only fail later, one by one."""
        if device == "cuda" and self.num_gpus_per_actor <= 0:
            raise ConfigError("device", "device=cuda on backend=ray needs GPUs for the "
                              "actors: set ray.num_gpus_per_actor (e.g. 0.25), or device=auto")
