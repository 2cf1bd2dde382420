"""The strategy contract (v3).

A strategy is a decentralized training method written as the paper's algorithm box:

* ``Config`` — a dataclass of its hyper-parameters, each field with its declared range
  (:mod:`decent.core.schema`), checked before anything is built;
* ``State`` — a dataclass of what one client keeps between phases (its optimiser, public
  copies, message logs, ...): the platform creates it with :meth:`Strategy.init_state`,
  hands it back as ``client.state``, and can save and restore it;
* its phases, declared as data: each phase method is marked ``@phase(name, role)``
  (:mod:`decent.strategies.phases`), ``(client, inbox, ctx) -> messages to send``;
  :meth:`Strategy.phases` is the round's schedule of phase names (by default the declared
  phases in order). Every client runs each phase in turn — the clients whose
  :meth:`Strategy.role` the phase was declared for — and the messages sent in one phase
  are the inbox (:class:`~decent.strategies.inbox.Inbox`) of the next (the last phase's
  arrive in the first phase of the next round). A name may repeat (SeedFlood's flooding
  sends): ``ctx.step`` is the phase's position in the round.

A strategy is built once per process from its config and the facts of the graph
(:class:`~decent.core.graph.GraphFacts`), and is immutable afterwards: everything that
changes during a run lives in the clients' ``State`` or in the per-process object that
:meth:`Strategy.init_process` returns (``ctx.shared``: e.g. a subspace every hosted
client shares; :meth:`Strategy.shared_tensors` tells the platform how to treat its
tensors). A config the method cannot run (a graph it refuses, a list of the wrong
length) raises :class:`~decent.core.errors.ConfigError` from the constructor; a schedule
naming a phase no method declares raises :class:`~decent.core.errors.StrategyError`.

Strategies see clients, tensors and plain-Python graph views only: they never import
ray or networkx, so the same code runs on the local backend and on Ray actors. What the
phases compute with is in :mod:`decent.strategies.toolkit`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np
import torch

from decent.core.errors import StrategyError
from decent.core.graph import GraphFacts, RoundGraph
from decent.core.messages import Message
from decent.core.stats import Stat
from decent.models import params
from decent.robust.aggregators import AggregatorConfig
from decent.robust.neighbourhood import check_robust
from decent.strategies.inbox import Inbox
from decent.strategies.phases import WORKER, Phase, collect
from decent.tasks.base import ClientData, Task

StateT = TypeVar("StateT")
FROZEN = ("read_only", "written", "private")  # SharedTensors.frozen


@dataclass
class Client(Generic[StateT]):
    """One simulated client: its model replica, its data shard and its private state.

    ``state`` is the strategy's typed per-client state; ``generator`` is the client's own
    RNG, seeded from the run seed and the client id, so a client draws the same batches
    whichever actor hosts it; ``stats`` are what it reports for the current round."""

    cid: int
    model: torch.nn.Module
    data: ClientData | None
    device: torch.device
    generator: torch.Generator
    state: StateT = None  # type: ignore[assignment]  # set by Strategy.init_state
    stats: dict[str, Stat] = field(default_factory=dict)
    # The client's own state of torch's global RNG (dropout, e.g. LoRA's, draws from it):
    # swapped in while the client computes, so results do not depend on grouping.
    rng_states: dict[str, torch.Tensor] = field(default_factory=dict)
    # Optimisation steps taken in the current phase: what a modelled compute time charges
    # (the platform reads and resets it after every phase).
    steps: float = 0
    # The client's compute speed factor (``compute.speeds`` / ``compute.speed_spread``; 1:
    # the reference device): what a method with workers of different speeds (DSO's
    # asynchronous option) derives its schedule from. Set by the platform.
    speed: float = 1.0
    # Local steps taken under DP-SGD since the run began (``privacy``): what the client's
    # ε is accounted for; kept in checkpoints.
    private_steps: int = 0
    # The run's task (the same as ``ctx.task``), set by the platform before init_state: a
    # state that starts from a gradient (a tracker at ∇f_i(x⁰)) computes it there.
    task: Task | None = None

    def count_steps(self, k: float) -> None:
        """Charge ``k`` optimisation steps (one local SGD step, one ZO estimate; a
        fraction: the part of a longer step done in this phase) to this phase's compute
        time."""
        self.steps += k


# what serves a client's request inside a batched phase (the process's batcher: the
# requests are in decent.strategies.step_batching); None: sequential execution
StepRunner = Callable[[Any], Any]


@dataclass(frozen=True)
class PhaseContext:
    """What a client may know about the current phase.

    ``step`` is the phase's position in the round's phase list (0 for the first);
    ``shared`` is what :meth:`Strategy.init_process` returned in this process; ``alive``
    the clients believed to take part in this round (all of them without churn; a client
    that crashed this round is still listed: its messages come back undeliverable);
    ``joined`` the clients that arrived at the start of this round. ``tamper`` is set for
    a Byzantine client only: a method that commits to a value before sending it (DSO)
    passes the value through ``tamper(value, dst)`` first, so the client's attack is in
    what it commits to, and marks the message ``tampered``; every other message is
    attacked as it leaves. ``runner`` is set where the process runs its clients batched:
    the toolkit's calls hand their work to it (see :mod:`decent.strategies.step_batching`)."""

    round: int
    phase: str
    step: int
    graph: RoundGraph
    task: Task
    shared: Any = None
    alive: frozenset[int] | None = None  # None: every client
    joined: frozenset[int] = frozenset()
    tamper: Callable[[Any, int], Any] | None = None
    # a batched process's runner: the toolkit's local steps, gossip mixes and zeroth-order
    # estimates hand their requests to it (None: each client computes its own)
    runner: StepRunner | None = None


@dataclass(frozen=True)
class SharedTensors:
    """How the platform treats the tensors that the clients hosted in one process share
    (what :meth:`Strategy.shared_tensors` returns).

    ``frozen``: what happens to the frozen weights of the model the replicas were made
    from (which they share):
    ``"read_only"`` (default) — nobody writes them: processes on one machine may map a
    single read-only copy (a LoRA base, SubCGE's W) and a checkpoint leaves them out;
    ``"written"`` — the method writes them, the same in every process (SeedFlood folds its
    subspace into them): each process keeps its own, and a checkpoint stores them;
    ``"private"`` — each process writes its own and they carry no state (SPES loads the
    evaluated global model's experts into them): neither mapped nor stored.
    ``tensors``: tensors of the per-process object that the clients' models use as their
    own parameters (SPES's versions of the frozen experts): a checkpoint stores them once,
    with that object, not once per client.
    ``relink``: after a checkpoint was loaded into the clients and the object, point the
    clients' models at ``tensors`` again (values alone do not say which one a model uses).
    """

    frozen: str = "read_only"
    tensors: tuple[torch.Tensor, ...] = ()
    relink: Callable[[Sequence[Client[Any]]], None] | None = None

    def __post_init__(self) -> None:
        if self.frozen not in FROZEN:
            raise StrategyError(f"SharedTensors.frozen is one of {FROZEN}; got {self.frozen!r}")

    def __iter__(self) -> Iterator[torch.Tensor]:
        """The ``tensors``: what a footprint counts as held once per process."""
        return iter(self.tensors)


class Frozen(type):
    """Metaclass: instances refuse attribute assignment once ``__init__`` has returned, and
    a strategy's schedule and roles are checked against its phase table then."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        obj = super().__call__(*args, **kwargs)
        object.__setattr__(obj, "_frozen", True)
        obj.check_contract()
        return obj


class Strategy(Generic[StateT], metaclass=Frozen):
    """Base class; subclasses set ``name``, ``Config`` and ``State``, define
    :meth:`init_state` and mark one method per phase with ``@phase``."""

    name: ClassVar[str]
    Config: ClassVar[type]
    State: ClassVar[type]
    # The roles its clients may have (:meth:`role`); a phase is declared for one of them
    # or for all. Workers hold the training data.
    roles: ClassVar[tuple[str, ...]] = (WORKER,)
    # True: a joining client gets its model through the method's own messages in its
    # first round (Combo's pulls), so the platform sends it no mean of its neighbours
    pulls_on_join: ClassVar[bool] = False
    # True: every phase takes its clients' training steps through local_steps with
    # torch's SGD or AdamW, so a process may run its clients' steps stacked
    # (execution.mode: batched); batch_note says why a method that cannot, cannot
    batchable: ClassVar[bool] = False
    # True: the method runs on a directed graph (push-sum: a client sends to its
    # out-neighbours and hears from its in-neighbours); False: the graph must be undirected
    directed_graphs: ClassVar[bool] = False
    # True: the method needs every client to reach every other along directed edges
    needs_strong_connectivity: ClassVar[bool] = False
    batch_note: ClassVar[str] = ""
    # The phase table, collected from the @phase marks when the class is defined
    phase_table: ClassVar[tuple[Phase, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.phase_table = collect(cls, cls.roles)

    def __init__(self, cfg: Any, graph: GraphFacts) -> None:
        self.cfg = cfg
        self.graph = graph
        self.n = graph.n
        robust = getattr(cfg, "robust", None)
        if isinstance(robust, AggregatorConfig):
            self.check_robust(robust, graph)

    def check_robust(self, robust: AggregatorConfig, graph: GraphFacts) -> None:
        """Refuse, in one line, a ``robust`` rule that cannot run on ``graph``: by default
        over a gossip neighbourhood (a client and its neighbours)."""
        check_robust(robust, graph.degrees)

    def __setattr__(self, key: str, value: Any) -> None:
        if getattr(self, "_frozen", False):
            raise AttributeError(
                f"strategy '{self.name}' is immutable once built: keep what changes during a "
                f"run in the clients' State or in init_process's shared object (tried to set "
                f"{key!r})"
            )
        object.__setattr__(self, key, value)

    # ------------------------------------------------------------------ what to run
    def phases(self, round_: int) -> Sequence[str]:
        """The phase names of round ``round_``: by default every declared phase once, in
        the order declared. Override for a schedule that repeats or varies a phase."""
        return tuple(dict.fromkeys(row.name for row in self.phase_table))

    def role(self, cid: int) -> str:
        """Client ``cid``'s role, one of :attr:`roles` (every client a worker by default)."""
        return WORKER

    def data_holders(self) -> list[int]:
        """Clients that own training data: the workers (a server vertex holds none)."""
        return [cid for cid in range(self.n) if self.role(cid) == WORKER]

    def phase_method(self, phase: str, cid: int) -> Callable[..., Any] | None:
        """The method that runs ``phase`` for client ``cid``, or None where the phase is
        not declared for its role (the client takes no part in it)."""
        rows = [row for row in self.phase_table if row.name == phase]
        if not rows:
            raise StrategyError(self._undeclared(phase))
        role = self.role(cid)
        for row in rows:
            if row.role is None or row.role == role:
                return getattr(self, row.method)  # type: ignore[no-any-return]
        return None

    def run_phase(self, client: Client[StateT], inbox: list[Message],
                  ctx: PhaseContext) -> list[Message]:
        """Run ``ctx.phase`` for ``client`` through the phase table (the only dispatch
        there is): nothing for a client whose role the phase was not declared for."""
        method = self.phase_method(ctx.phase, client.cid)
        if method is None:
            return []
        return method(client, Inbox.of(inbox, client.cid, ctx), ctx) or []

    def check_contract(self) -> None:
        """Refuse, at build time and in one line, a schedule that names an undeclared
        phase or a client whose role the strategy does not list."""
        for name in self.phases(0):
            if not any(row.name == name for row in self.phase_table):
                raise StrategyError(self._undeclared(name))
        for cid in range(self.n):
            if self.role(cid) not in self.roles:
                raise StrategyError(f"strategy '{self.name}': client {cid} has role "
                                    f"'{self.role(cid)}', not one of its roles {self.roles}")

    def _undeclared(self, phase: str) -> str:
        declared = ", ".join(dict.fromkeys(row.name for row in self.phase_table)) or "none"
        return (f"strategy '{self.name}': phase '{phase}' is not declared (declared: "
                f"{declared}); mark the method that runs it with @phase('{phase}')")

    # ------------------------------------------------------------------ set-up
    def init_process(self, model: torch.nn.Module) -> Any:
        """Once per process, before the clients' replicas are made from ``model``: adjust
        the initial model (e.g. freeze tensors so every hosted client shares them) and
        return what the hosted clients share (``ctx.shared``); None by default."""
        return None

    def init_state(self, client: Client[StateT], shared: Any) -> StateT:
        """The client's ``State`` before round 0."""
        raise NotImplementedError

    def init_eval_state(self, client: Client[StateT], shared: Any) -> StateT | None:
        """The state of the model the global average (GMP) is loaded into for evaluation:
        only what :meth:`load_state_vector` needs. None by default (the default vector
        is the model's trainable parameters)."""
        return None

    def churn_problem(self, client: int, kind: str) -> str | None:
        """Why this method cannot go on when ``client`` leaves or crashes (``kind``), or
        None if it can. The run is refused before it starts (or stopped, for a real
        crash) with this reason, never left to hang or to compute something wrong."""
        return None

    def traffic_bytes(self, cid: int, degree: int, trainable: int) -> tuple[int, int]:
        """For the memory plan, two sizes the built state does not show: what client
        ``cid``'s state grows to within a round from what it receives, and the most it
        sends in one phase. By default nothing, and one copy of its ``trainable`` bytes
        to each of its ``degree`` neighbours (a model-averaging payload)."""
        return 0, degree * trainable

    def privacy_note(self, byzantine: list[int], attack: str) -> str | None:
        """For the run's summary, beside any ``dp_epsilon``: what that privacy figure
        leaves out, or why the run has none, given the Byzantine clients and their
        ``attack``. By default, for a method whose ``privacy`` is on: that a Byzantine
        client's own data is not covered (it sends its attack); else nothing (None)."""
        privacy = getattr(self.cfg, "privacy", None)
        if privacy is None or not privacy.enabled or not byzantine:
            return None
        return (f"dp_epsilon covers the honest clients only: the Byzantine clients "
                f"{sorted(byzantine)} send their attack ({attack}), so their own data has "
                "no bound")

    def bootstrap(self, client: Client[StateT], vector: np.ndarray | None,
                  shared: Any) -> None:
        """A client that joins: start from ``vector`` (the mean of its present
        neighbours' models; None when ``pulls_on_join``), with a fresh state."""
        if vector is not None:
            self.load_state_vector(client, vector)
        client.state = self.init_state(client, shared)

    def shared_tensors(self, shared: Any) -> SharedTensors:
        """How the tensors the hosted clients share behave (:class:`SharedTensors`); by
        default the frozen weights are never written and ``shared`` holds none."""
        return SharedTensors()

    def begin_phase(self, ctx: PhaseContext, clients: Sequence[Client[StateT]]) -> None:
        """Work shared by the clients hosted in one process, before they run ``ctx.phase``
        (e.g. refreshing a subspace held once per process)."""

    # ------------------------------------------------------------------ the model
    def state_vector(self, client: Client[StateT]) -> np.ndarray:
        """The replica's state as one float64 vector: averaged into the global model
        (GMP) and compared for the consensus distance. Default: trainable parameters."""
        return params.flat_vector(client.model)

    def load_state_vector(self, client: Client[StateT], vector: np.ndarray) -> None:
        params.load_flat(client.model, vector)

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def to_neighbours(client: Client[Any], ctx: PhaseContext, tag: str,
                      payload: Any, meta: tuple[Any, ...] = (), items: int = 1
                      ) -> list[Message]:
        """The same payload to every neighbour of ``client`` this round believed alive, in
        id order (``items``: the updates it bundles, see :class:`Message`)."""
        return [Message(client.cid, j, tag, payload, meta=meta, items=items)
                for j in ctx.graph.neighbors[client.cid]
                if ctx.alive is None or j in ctx.alive]
