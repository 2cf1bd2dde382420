"""The strategy contract.

A strategy is a decentralized training method written as the paper's algorithm box:

* ``Config`` — a dataclass of its hyper-parameters (validated before anything runs);
* :meth:`Strategy.phases` — the phases of round ``t``; every client runs each phase in
  turn, and the messages sent in one phase are the inbox of the next one (the last
  phase's messages arrive in the first phase of the next round);
* one method per phase, ``(client, inbox, ctx) -> messages to send``.

Strategies see clients, tensors and plain-Python graph views only: they never import
ray or networkx, so the same code runs on the local backend and on Ray actors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch

from decent.models import params
from decent.platform.messages import Message
from decent.tasks.base import ClientData, Task
from decent.topologies import RoundGraph, Topology


@dataclass
class Client:
    """One simulated client: its model replica, its data shard and its private state.

    ``state`` belongs to the strategy (optimizer, public copies, message logs...);
    ``generator`` is the client's own RNG, seeded from the run seed and the client id,
    so a client draws the same batches whichever actor hosts it."""

    cid: int
    model: torch.nn.Module
    data: ClientData | None
    device: torch.device
    generator: torch.Generator
    state: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, float] = field(default_factory=dict)
    # The client's own state of torch's global RNG (dropout, e.g. LoRA's, draws from it):
    # swapped in while the client computes, so results do not depend on grouping.
    rng_states: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass(frozen=True)
class PhaseContext:
    """What a client may know about the current phase."""

    round: int
    phase: str
    graph: RoundGraph
    task: Task


class Strategy:
    """Base class; subclasses set ``name`` and ``Config`` and define the phase methods."""

    name: ClassVar[str]
    Config: ClassVar[type]

    def __init__(self, cfg: Any, n: int) -> None:
        self.cfg = cfg
        self.n = n

    def check_topology(self, topology: Topology) -> None:
        """Raise ConfigError if the method cannot run on this graph; remember what the
        method needs of it (e.g. the diameter). Called wherever a strategy is built."""

    def data_holders(self) -> list[int]:
        """Clients that own training data (a server vertex holds none)."""
        return list(range(self.n))

    def phases(self, round_: int) -> Sequence[str]:
        raise NotImplementedError

    def prepare_model(self, model: torch.nn.Module) -> None:
        """Adjust the initial model once per process, before the clients' replicas are
        made (e.g. freeze tensors so every hosted client shares them)."""

    def begin_phase(self, round_: int, phase: str, clients: Sequence[Client]) -> None:
        """Work shared by the clients hosted in one process, before they run ``phase``
        (e.g. refreshing a subspace held once per process)."""

    def state_vector(self, model: torch.nn.Module) -> np.ndarray:
        """The replica's state as one float64 vector: averaged into the global model
        (GMP) and compared for the consensus distance. Default: trainable parameters."""
        return params.flat_vector(model)

    def load_state_vector(self, model: torch.nn.Module, vector: np.ndarray) -> None:
        params.load_flat(model, vector)

    def init_client(self, client: Client) -> None:
        """Create the client's strategy state before round 0."""

    def run_phase(
        self, phase: str, client: Client, inbox: list[Message], ctx: PhaseContext
    ) -> list[Message]:
        return getattr(self, phase)(client, inbox, ctx) or []
