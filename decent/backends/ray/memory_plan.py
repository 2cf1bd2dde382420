"""The memory planner: what a Ray run will take per actor and per node, before any actor
starts, and whether it fits.

The sizes come from a probe: the driver builds the clients of two ids (the first and the
last: a star's server and a worker, or an aggregator and a worker) exactly as an actor
would, counts the bytes of every tensor they hold, and frees them. Three parts:

- the model: every parameter and buffer once per process, except the frozen weights that
  CPU actors map from one copy in the object store (``ray.share_frozen``);
- per client: its private model tensors and their gradients, the tensors of its strategy
  state (optimiser slots included: the probe has taken a step), its data shard, and one
  phase's messages (what the first phase sent, and an inbox of as much);
- per process: the interpreter with torch, Ray and this package imported and run
  (ACTOR_RUNTIME_MB, plus LM_LIBRARIES_MB for transformers and peft, measured), the
  task's shared data (test set, tokenised corpus).

A node holds Ray's own daemons (RAY_DAEMONS_MB, measured), the driver (its resident memory
when the plan is made), its actors and the shared copy. While the actors start, each one
but the first builds its own copy of the model before it switches to the shared one: the
node's peak is the larger of that moment and the steady state. The estimate is printed
when a run starts; a run whose peak cannot fit is refused with the numbers and a
``clients_per_actor`` that would fit.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import gc
import math
import os
import pickle
import resource
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np
import torch

from decent.backends.ray.placement import placement
from decent.backends.ray.session import shutdown
from decent.core.errors import ConfigError
from decent.engine.config import RunConfig
from decent.engine.plan import RunPlan

# Every figure is proportional set size (PSS: a page shared by k processes counts 1/k in
# each), so that the figures of a node's processes add up to what the node spends.
# A ClientActor process (Python, torch 2.13 on CPU, Ray 2.60's worker, this package) once it
# has built and trained a model of negligible size: 314–319 MB measured on the reference
# machine (2 actors × 32 digits-MLP clients; 412–421 MB resident, the difference being
# shared libraries).
ACTOR_RUNTIME_MB = 317.0
# What a language-model actor adds by importing transformers and peft: 70 MB measured
# (tiny-llama actors at 388 MB against 317).
LM_LIBRARIES_MB = 70.0
LM_MODELS = ("causal_lm", "reward_model")
# Ray's own processes on a node (GCS, raylet, dashboard head and agent, runtime-env agent,
# log monitor, autoscaler monitor): 330 MB measured on the reference machine with an
# embedded Ray (475 MB resident).
RAY_DAEMONS_MB = 330.0
MB = 2**20


@dataclass(frozen=True)
class Footprint:
    """What the probe measured, in MB."""

    model_mb: float  # every parameter and buffer, once
    frozen_mb: float  # of which the frozen weights one machine can share
    per_client_mb: float  # the largest probed client: private tensors, state, data
    data_mb: float  # the task's data every process holds
    message_mb: float = 0.0  # the most one probed client sent in the first phase
    edge_mb: float = 0.0  # the largest payload one probed client sent one neighbour


@dataclass(frozen=True)
class MemoryPlan:
    actors: int
    clients_per_actor: int  # the largest group
    footprint: Footprint
    shared: bool  # the frozen weights are one copy per node
    runtime_mb: float  # one actor process before its model and clients
    per_actor_mb: float  # one actor's own memory (the shared copy not included)
    # what the system reports as the actor's PSS: its own memory and its share of the
    # copy, which every actor and the object store map
    actor_pss_mb: float
    node_mb: float  # the node once every actor has started
    node_peak_mb: float  # the node's peak: the steady state or the start, if larger
    available_mb: float | None  # None: unknown (the node's size could not be read)
    inbox_mb: float = 0.0  # the largest actor's inbox: what its clients receive in a phase
    actors_pss_mb: tuple[float, ...] = ()  # ``actor_pss_mb`` of each actor, in order

    def describe(self) -> str:
        f = self.footprint
        model = (f"model {f.model_mb - f.frozen_mb:.0f} MB + frozen {f.frozen_mb:.0f} MB "
                 "shared once per node" if self.shared and f.frozen_mb
                 else f"model {f.model_mb:.0f} MB")
        avail = "" if self.available_mb is None else f" of {self.available_mb:.0f} MB"
        return (f"memory plan: {self.actors} actor(s) × ≤{self.clients_per_actor} clients, "
                f"~{self.per_actor_mb:.0f} MB per actor (runtime {self.runtime_mb:.0f} + "
                f"data {f.data_mb:.0f} + {model} + {f.per_client_mb:.2f} MB per client + "
                f"inbox {self.inbox_mb:.0f} MB); "
                f"node ~{self.node_mb:.0f} MB, peak ~{self.node_peak_mb:.0f} MB{avail}")


def reachable(obj: Any, seen: set[int] | None = None) -> Iterator[Any]:
    """``obj`` and every object reachable from it through dataclasses, containers, plain
    objects' attributes, optimisers (parameters and state) and modules (parameters, their
    gradients, buffers), once each."""
    seen = set() if seen is None else seen
    if id(obj) in seen or isinstance(obj, type):
        return
    seen.add(id(obj))
    yield obj
    if isinstance(obj, (torch.Tensor, np.ndarray)):
        return
    if isinstance(obj, torch.nn.Module):
        children: list[Any] = [*obj.buffers()]
        for p in obj.parameters():
            children += [p] if p.grad is None else [p, p.grad]
    elif isinstance(obj, torch.optim.Optimizer):
        children = [[g["params"] for g in obj.param_groups], obj.state]
    elif dataclasses.is_dataclass(obj):
        children = [getattr(obj, f.name) for f in dataclasses.fields(obj)]
    elif isinstance(obj, dict):
        children = list(obj.values())
    elif isinstance(obj, (list, tuple, set)):
        children = list(obj)
    elif hasattr(obj, "__dict__"):  # a plain object (SubCGE's estimator)
        children = [vars(obj)]
    else:
        return
    for child in children:
        yield from reachable(child, seen)


def tensors_in(obj: Any) -> Iterator[torch.Tensor]:
    """Every tensor reachable from ``obj`` (see :func:`reachable`), once each."""
    return (x for x in reachable(obj) if isinstance(x, torch.Tensor))


def storage_bytes(tensors: Iterator[torch.Tensor], exclude: set[int]) -> tuple[int, set[int]]:
    """Bytes of the distinct storages of ``tensors`` not in ``exclude`` (storage
    addresses), and the addresses counted."""
    counted: set[int] = set()
    total = 0
    for t in tensors:
        if t.device.type == "meta":
            continue
        ptr = t.untyped_storage().data_ptr()
        if ptr in exclude or ptr in counted or ptr == 0:
            continue
        counted.add(ptr)
        total += t.untyped_storage().nbytes()
    return total, counted


def optimiser_slots(opt: torch.optim.Optimizer) -> int:
    """State values per trainable value the optimiser fills at its first step."""
    name = type(opt).__name__.lower()
    if name.startswith("adam"):
        return 2
    return 1 if opt.defaults.get("momentum", 0) else 0


def probe(cfg: RunConfig, plan: RunPlan) -> Footprint:
    """Build the first and the last client as an actor would, run the first phase of
    round 0 for them (gradients and optimiser state then exist), measure, free."""
    from decent.engine.group import ClientGroup

    cids = sorted({0, cfg.n - 1})
    group = ClientGroup(cfg, cids, torch.device("cpu"), plan)
    try:
        first = group.strategy.phases(0)[0]
        sent, _ = group.run_phase(0, 0, first, {})
        out = dict.fromkeys(cids, 0)
        edge = 0
        for msg in sent:
            size = storage_bytes(tensors_in(msg.payload), set())[0]
            out[msg.src] += size
            edge = max(edge, size)
        del sent
        base = {t.untyped_storage().data_ptr() for t in tensors_in(group.base_model)}
        base.update(t.untyped_storage().data_ptr()
                    for t in group.strategy.shared_tensors(group.shared).tensors)
        model, _ = storage_bytes(tensors_in(group.base_model), set())
        frozen, _ = storage_bytes(iter(group.shareable().values()), set())
        shared, _ = storage_bytes(tensors_in(group.shared), base)
        # the task's tensors (a client's shard may be a view of them: counted here once)
        # and arrays
        task, task_ptrs = storage_bytes(tensors_in(vars(group.task)), base)
        task += sum(x.nbytes for x in reachable(vars(group.task))
                    if isinstance(x, np.ndarray))
        per_client = 0
        for cid in cids:
            client = group.clients[cid]
            own, _ = storage_bytes(tensors_in([client.model, client.state, client.data]),
                                   base | task_ptrs)
            # optimiser slots the first phase did not fill yet (a server's outer step)
            slots = sum(optimiser_slots(o) * sum(p.numel() * p.element_size()
                                                 for g in o.param_groups for p in g["params"])
                        for o in reachable(client.state)
                        if isinstance(o, torch.optim.Optimizer) and not o.state)
            # its inbox is counted per actor, from the graph (plan_memory); the payloads it
            # sends wait in the object store, counted with the node
            per_client = max(per_client, own + slots)
        data = task + shared
    finally:
        del group
        gc.collect()
        release_freed_memory()
    return Footprint(model / MB, frozen / MB, per_client / MB, data / MB,
                     max(out.values()) / MB, edge / MB)


def probe_beside(cfg: RunConfig, plan: RunPlan, start: Callable[[], bool]
                 ) -> tuple[Footprint, bool]:
    """The probe's footprint, measured in a thread while ``start()`` (Ray's start, which
    must run on the main thread) runs, and what ``start`` returned."""
    box: dict[str, Any] = {}

    def measure() -> None:
        try:
            box["footprint"] = probe(cfg, plan)
        except BaseException as exc:  # re-raised on the main thread
            box["error"] = exc

    thread = threading.Thread(target=measure, name="memory-probe")
    thread.start()
    try:
        started = start()
    finally:
        thread.join()
    if "error" in box:
        if started:
            shutdown()
        raise box["error"]
    return box["footprint"], started


def probe_apart(cfg: RunConfig, plan: RunPlan) -> Footprint:
    """:func:`probe` in a fresh Python process that exits after it, for a language model:
    the driver then never imports transformers and peft nor keeps the heap the model's
    build leaves behind (~230 MB of a SmolLM2 run's driver, in PSS). A plain subprocess
    rather than multiprocessing's spawn, which re-runs the caller's script when it has no
    ``__main__`` guard. A user error in the probe (a ConfigError) is raised here.

    A driver that has imported transformers already (a notebook or a script that built a
    model, one running several configs) probes in its own process: a process apart would
    spare it nothing of the import and cost ~6 s of start-up per run, and the probe hands
    the build's freed heap back itself."""
    if "transformers" in sys.modules:
        return probe(cfg, plan)
    with tempfile.TemporaryDirectory(prefix="decent-probe-") as folder:
        box = Path(folder) / "box.pkl"
        # cloudpickle: the plan's topology holds a closure (its latency function)
        box.write_bytes(cloudpickle.dumps((cfg, plan)))
        done = subprocess.run([sys.executable, "-c", "import sys; from decent.backends."
                               "ray.memory_plan import probe_box; probe_box(sys.argv[1])",
                               str(box)], check=False, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            raise probe_died(done.returncode, done.stderr)
        got = pickle.loads(box.read_bytes())
    if isinstance(got, BaseException):
        raise got
    return got


def probe_died(code: int, stderr: str) -> ConfigError:
    """One line for a probe process that ended without its footprint: killed by a signal
    (the kernel's out-of-memory killer sends SIGKILL) or crashed (its last line said)."""
    if code < 0:
        how = f"was killed by {signal.Signals(-code).name}"
        hint = " (out of memory?)" if -code == signal.SIGKILL else ""
    else:
        last = (stderr.strip().splitlines() or ["no message"])[-1]
        how, hint = f"failed ({last})", ""
    return ConfigError("ray.memory_plan", f"the memory probe process {how}{hint} before "
                       "it measured the run; free memory, or set ray.memory_plan=false to "
                       "run without the plan")


def probe_box(path: str) -> None:
    """The probe process: read the config and the plan from ``path``, write back the
    footprint (or the error that stopped it)."""
    cfg, plan = pickle.loads(Path(path).read_bytes())
    try:
        got: Any = probe(cfg, plan)
    except Exception as exc:  # the caller raises it
        got = exc
    try:
        data = pickle.dumps(got)
    except Exception:  # an error that does not pickle: its type and text do
        data = pickle.dumps(RuntimeError(f"{type(got).__name__}: {got}"))
    Path(path).write_bytes(data)


def release_freed_memory() -> None:
    """Hand the heap that freed tensors leave behind back to the system (glibc keeps it
    otherwise: the driver would carry the probe's model for the whole run)."""
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to do
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def plan_memory(footprint: Footprint, groups: list[list[int]], shared: bool,
                available_mb: float | None, driver_mb: float, model: str,
                on_gpu: bool = False, store_mb: float = math.inf,
                degrees: Sequence[int] | None = None) -> MemoryPlan:
    """Per-actor and per-node estimates for ``groups`` (one list of clients per actor),
    with the driver at ``driver_mb``; ``model`` is the model's registry name. A phase's
    payloads wait in the object store (at most ``store_mb``). A client's inbox, decoded
    from the store, is its number of neighbours (``degrees``, by client) times the largest
    payload sent one neighbour: a star's server hears from every worker. Without
    ``degrees`` a client is taken to receive what it sends."""
    f = footprint
    k = max(len(g) for g in groups)
    runtime = ACTOR_RUNTIME_MB + (LM_LIBRARIES_MB if model in LM_MODELS else 0.0)
    own_model = f.model_mb - (f.frozen_mb if shared else 0.0)

    def inbox(group: list[int]) -> float:
        if degrees is None:
            return len(group) * f.message_mb
        return sum(degrees[c] for c in group) * f.edge_mb

    # on a GPU the model and the clients' tensors live in device memory
    actor_mb = [runtime + f.data_mb + (0.0 if on_gpu else own_model + len(g) * f.per_client_mb
                                       + inbox(g)) for g in groups]
    per_actor = max(actor_mb)
    copy = f.frozen_mb if shared else 0.0
    actors = len(groups)
    in_flight = min(store_mb, sum(map(len, groups)) * f.message_mb)
    node = RAY_DAEMONS_MB + driver_mb + sum(actor_mb) + copy + in_flight
    # starting: the first actor has switched to the copy; the others hold what they built
    start = RAY_DAEMONS_MB + driver_mb + copy + actors * (runtime + f.data_mb) + \
        (actors - 1) * f.frozen_mb if shared else 0.0
    share = copy / (actors + 1)  # of the copy every actor and the object store map
    return MemoryPlan(actors, k, f, shared, runtime, per_actor, per_actor + share, node,
                      max(node, start), available_mb, max(inbox(g) for g in groups),
                      tuple(mb + share for mb in actor_mb))


def check_fits(mem: MemoryPlan, n: int,
               replan: Callable[[list[list[int]]], MemoryPlan]) -> None:
    """Refuse a plan above the node's memory, with the ``clients_per_actor`` that fits
    with the most actors if one does (fewer actors: fewer runtimes and model copies).
    ``replan(groups)`` is the plan for another grouping of the ``n`` clients."""
    if mem.available_mb is None or mem.node_peak_mb <= mem.available_mb:
        return
    for actors in range(mem.actors - 1, 0, -1):
        k = math.ceil(n / actors)
        if replan(placement(n, k)).node_peak_mb <= mem.available_mb:
            hint = f"set ray.clients_per_actor={k} ({math.ceil(n / k)} actor(s))"
            break
    else:
        hint = ("even one actor does not fit: use fewer clients (topology.n), a smaller "
                "model, GPUs (ray.num_gpus_per_actor) or a bigger machine")
    raise ConfigError("ray.clients_per_actor",
                      f"the run needs ~{mem.node_peak_mb:.0f} MB on one node but "
                      f"{mem.available_mb:.0f} MB are available ({mem.describe()}); {hint}")


def available_mb() -> float | None:
    """Memory this machine has available now (Linux /proc/meminfo), in MB."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def process_memory_mb() -> dict[str, float]:
    """This process's memory: resident now, resident at its peak, proportional now (MB)."""
    out = {"rss": 0.0, "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "pss": 0.0}
    for file, key, name in (("status", "VmRSS:", "rss"), ("status", "VmHWM:", "peak_rss"),
                            ("smaps_rollup", "Pss:", "pss")):
        try:
            for line in Path(f"/proc/{os.getpid()}/{file}").read_text().splitlines():
                if line.startswith(key):
                    out[name] = int(line.split()[1]) / 1024
                    break
        except OSError:
            continue
    return out
