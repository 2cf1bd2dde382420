"""The memory planner: what a Ray run will take per actor and per node — and, for a GPU run,
per GPU — before any actor starts, and whether it fits.

The sizes come from the probe (:mod:`decent.backends.ray.footprint`): the clients of two
ids built once on the CPU, their figures computed from the built tensors' shapes (model,
frozen weights, trainable parameters, gradients, optimiser slots, strategy state, data,
messages) and one batch's activations measured in one forward; no phase and no optimiser
step run. One line says so before it starts. Three parts on a host:

- the model: every parameter and buffer once per process, except the frozen weights that
  CPU actors map from one copy in the object store (``ray.share_frozen``);
- per client: its private model tensors and their gradients, the tensors of its strategy
  state and the optimiser slots its first step fills, its data shard, and one phase's
  messages (one payload per neighbour, and an inbox of as much);
- per process: the interpreter with torch, Ray and this package imported and run
  (ACTOR_RUNTIME_MB, plus LM_LIBRARIES_MB for transformers and peft, measured), the
  task's shared data (test set, tokenised corpus).

A node holds Ray's own daemons (RAY_DAEMONS_MB, measured), the driver (its resident memory
when the plan is made), its actors and the shared copy. While the actors start, each one
but the first builds its own copy of the model before it switches to the shared one: the
node's peak is the larger of that moment and the steady state. The estimate is printed
when a run starts; a run whose peak cannot fit is refused with the numbers and a
``clients_per_actor`` that would fit. A GPU's actors are planned and checked the same way
(:func:`plan_gpu_memory`, :func:`check_gpu_fits`).
"""

from __future__ import annotations

import math
import os
import pickle
import resource
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cloudpickle

from decent.backends.ray.footprint import (  # noqa: F401  (re-exported: their old home)
    MB,
    Footprint,
    optimiser_slots,
    probe,
    probe_line,
    reachable,
    release_freed_memory,
    storage_bytes,
    tensors_in,
)
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


def probe_beside(cfg: RunConfig, plan: RunPlan, start: Callable[[], bool]
                 ) -> tuple[Footprint, bool]:
    """The probe's footprint, measured in a thread while ``start()`` (Ray's start, which
    must run on the main thread) runs, and what ``start`` returned."""
    box: dict[str, Any] = {}
    print(probe_line(cfg), flush=True)

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
    print(probe_line(cfg), flush=True)
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


# A CUDA context with torch's kernels loaded, per process using a GPU: ~500 MB of device
# memory (torch 2 with CUDA 12's lazy module loading; 300–600 MB by driver and GPU).
# Not measured on this machine (it has no GPU): a typical figure.
CUDA_CONTEXT_MB = 500.0


def actor_gpu_mb(f: Footprint, clients: int, chunk: int) -> tuple[float, float, float]:
    """One actor's device memory as (fixed, clients, chunk): its CUDA context, model
    (frozen base included: one copy per actor process) and task data; its clients'
    private state; the padding rows of its stacked chunks (a batched process pads its last
    chunk to ``chunk`` rows of parameters and optimiser slots) and the activations of one
    chunk (``min(chunk, clients)`` clients' batches at once)."""
    padded = (math.ceil(clients / chunk) * chunk - clients) if chunk > 1 else 0
    return (CUDA_CONTEXT_MB + f.model_mb + f.data_mb, clients * f.per_client_mb,
            padded * f.trainable_mb * (1 + f.slots) + min(chunk, clients) * f.activation_mb)


@dataclass(frozen=True)
class GpuPlan:
    """Device memory per GPU for the actors each hosts (see :func:`plan_gpu_memory`)."""

    footprint: Footprint
    groups_on_gpu: tuple[tuple[tuple[int, ...], ...], ...]  # GPU → its actors' clients
    gpu_mb: float | None  # one GPU's memory; None: unknown (not checked)
    chunk: int  # the width of one stacked computation (1: sequential)
    actors_mb: tuple[tuple[float, ...], ...]  # GPU → each actor's device memory

    @property
    def per_gpu_mb(self) -> tuple[float, ...]:
        return tuple(sum(a) for a in self.actors_mb)

    @property
    def fullest(self) -> int:
        """The GPU that needs the most."""
        return max(range(len(self.actors_mb)), key=lambda g: self.per_gpu_mb[g])

    @property
    def fits(self) -> bool:
        return self.gpu_mb is None or max(self.per_gpu_mb) <= self.gpu_mb

    def describe(self) -> str:
        f, g = self.footprint, self.fullest
        held = self.groups_on_gpu[g]
        k = max(len(c) for c in held)
        fixed, _, chunk = actor_gpu_mb(f, k, self.chunk)
        of = "" if self.gpu_mb is None else f" of {self.gpu_mb:.0f} MB"
        return (f"gpu plan: {len(self.actors_mb)} GPU(s), ≤{len(held)} actor(s) per GPU × "
                f"≤{k} clients, ~{max(self.actors_mb[g]):.0f} MB per actor (context + "
                f"model + data {fixed:.0f} + {f.per_client_mb:.2f} MB per client + chunk "
                f"{chunk:.0f} MB: activations {f.activation_mb:.1f} MB per client, "
                f"{self.chunk} wide); fullest GPU ~{self.per_gpu_mb[g]:.0f} MB{of}")


def plan_gpu_memory(footprint: Footprint, groups_on_gpu: Sequence[Sequence[Sequence[int]]],
                    gpu_mb: float | None, chunk: int) -> GpuPlan:
    """``plan_gpu_memory(footprint, groups_on_gpu, gpu_mb, chunk) -> GpuPlan``, pure.

    ``groups_on_gpu[g]`` lists the actors on GPU ``g`` as their clients' ids; ``gpu_mb`` is
    one GPU's memory (None: unknown); ``chunk`` the width of one stacked computation
    (``min(execution.chunk, n)`` in batched mode, 1 in sequential mode). Each actor holds
    its CUDA context, the model and its frozen base once, the task's data, each of its
    clients' private state (parameters, gradients, optimiser slots, shard), its chunks'
    padding rows and one chunk's activations (:func:`actor_gpu_mb`)."""
    groups = tuple(tuple(tuple(c) for c in actors) for actors in groups_on_gpu)
    actors_mb = tuple(tuple(sum(actor_gpu_mb(footprint, len(c), chunk)) for c in actors)
                      for actors in groups)
    return GpuPlan(footprint, groups, gpu_mb, chunk, actors_mb)


def check_gpu_fits(plan: GpuPlan) -> None:
    """Refuse, in one line naming the field to change, a plan whose fullest GPU cannot
    hold its actors: fewer actors per GPU (``ray.num_gpus_per_actor``) where one actor
    fits, else a narrower chunk (``execution.chunk``), else fewer clients per actor
    (``ray.clients_per_actor``), whichever fits first."""
    if plan.fits or plan.gpu_mb is None:
        return
    f, cap, g = plan.footprint, plan.gpu_mb, plan.fullest
    held = plan.groups_on_gpu[g]
    k, actors = max(len(c) for c in held), len(held)

    def need(clients: int, chunk: int, count: int) -> float:
        return count * sum(actor_gpu_mb(f, clients, chunk))

    field, hint = "ray.num_gpus_per_actor", ""
    alone = need(k, plan.chunk, 1)
    if actors > 1 and alone <= cap:
        fit = int(cap // alone)
        hint = (f"set ray.num_gpus_per_actor={math.floor(100 / fit) / 100:g} "
                f"({fit} actor(s) per GPU)")
    else:
        chunk = next((c for c in range(plan.chunk - 1, 0, -1) if need(k, c, actors) <= cap),
                     None)
        clients = next((c for c in range(k - 1, 0, -1)
                        if need(c, plan.chunk, actors) <= cap), None)
        if chunk is not None:
            field, hint = "execution.chunk", f"set execution.chunk={chunk}"
        elif clients is not None:
            field, hint = "ray.clients_per_actor", f"set ray.clients_per_actor={clients}"
        else:
            hint = ("even one actor with one client does not fit one GPU: use a smaller "
                    "model, smaller batches (strategy.batch_size) or a GPU with more memory")
    raise ConfigError(field, f"GPU {g} would need ~{plan.per_gpu_mb[g]:.0f} MB for its "
                      f"{actors} actor(s) but has {cap:.0f} MB ({plan.describe()}); {hint}")
