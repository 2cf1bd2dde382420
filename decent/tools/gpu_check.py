"""``decent doctor --gpu``: every GPU path of the platform, run in a few minutes on the
machine at hand, and a table of pass / fail with the figures behind each.

1. **fractional GPU actors** — DSGD on digits, 8 clients on 4 Ray actors sharing one GPU
   (``ray.num_gpus_per_actor: 0.25``), against the same run on the local backend on that
   GPU: the metric rows must be bit-identical (the same kernels on the same device). The
   largest difference from a CPU run is printed beside it (float rounding: not checked).
2. **SubCGE on CUDA** — SeedFlood (SubCGE, rank 8) on a random tiny Llama: two local runs
   on the GPU bit-identical, Ray with 2 and with 4 clients per actor identical to them,
   and every client's model identical to every other's (flooding reaches consensus
   exactly).
3. **RDT over NCCL** — DSGD with payloads of ~4 MB between 2 GPU actors, moved by Ray
   Direct Transport (NCCL) and through the object store: rows bit-identical, and the
   median round time of each (the payload transport's speed ratio). NCCL puts one rank per
   GPU, so this needs 2 GPUs.
4. **defaults on fractional GPU actors** — the run a user with one GPU starts: DSGD with
   ~4 MB payloads (above the 64 KiB RDT threshold) on 4 actors sharing one GPU, the memory
   plan on and ``payload_transport: auto`` as they are by default: rows bit-identical to
   the local run on that GPU, the transport the layout chose named (the object store:
   NCCL cannot hold two ranks of one device), and the memory probe's time.
5. **SeedFlood memory** — 128 SeedFlood clients of SmolLM2-135M on one GPU (the local
   backend: the clients share the frozen weights), the peak GPU memory of one round against
   the memory planner's estimate (the probe's model and per-client figures); passes within
   a factor of 2 either way (activations and CUDA's workspace are not planned).
6. **push-sum batched** — SGP and OSGP on the one-peer exponential graph (directed),
   clients batched on the GPU: Ray with 2 actors of 4 bit-identical to the local run,
   the sequential run within batched's stated 1e-5, and bytes counted equal in all three.

Then a short slice of the throughput benchmark (``benchmarks/gpu_throughput.py``):
sequential against batched clients for one workload of each family, in float32 and
bfloat16, with peak memory, the device's busy fraction and the model FLOPs utilisation.

Without a CUDA device it says so in one line and exits 0. Each check's runs write to a
temporary folder that is removed."""

from __future__ import annotations

import statistics
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from decent.engine.config import RayConfig, RunConfig, from_dict, to_dict

# the factor by which the peak GPU memory may differ from the plan (check 4)
MEMORY_FACTOR = 2.0
SEEDFLOOD_CLIENTS = 128


@dataclass(frozen=True)
class Outcome:
    name: str
    passed: bool | None  # None: not run here (the figures say why)
    figures: str


def config(out: Path, device: str, **sections: Any) -> RunConfig:
    """A small digits run (DSGD on a ring of 8, 3 rounds) on ``device``; ``sections``
    replace whole top-level keys."""
    raw: dict[str, Any] = {
        "name": "gpu-check", "seed": 0, "rounds": 3, "device": device,
        "topology": {"name": "ring", "n": 8},
        "strategy": {"name": "dsgd", "local_steps": 2, "batch_size": 16, "lr": 0.1},
        "task": {"name": "digits"}, "model": {"name": "mlp", "hidden": [64]},
        "eval": {"every": 1, "per_client": False},
        "tracking": {"out_dir": str(out / "runs"), "progress": False,
                     "wandb": {"mode": "disabled"}},
    }
    return from_dict(raw | sections)


def on_ray(cfg: RunConfig, **ray_cfg: Any) -> RunConfig:
    raw = to_dict(cfg)
    return from_dict({**raw, "backend": "ray",
                      "ray": {**raw["ray"], "memory_plan": False,
                              **ray_cfg}})


@dataclass
class Finished:
    rows: list[dict[str, Any]]  # without wall time
    summary: dict[str, Any]
    vectors: dict[int, np.ndarray]  # each client's model as the run left it
    round_s: list[float]  # each round's wall time


def finish(cfg: RunConfig) -> Finished:
    """Run ``cfg`` to its end, keeping each client's final model."""
    from decent.run.runner import check, make_engine, run

    engine = make_engine(cfg, check(cfg))
    vectors: dict[int, np.ndarray] = {}
    close = engine.close

    def keep_then_close() -> None:
        vectors.update(engine.client_vectors())
        close()

    engine.close = keep_then_close  # type: ignore[method-assign]
    result = run(cfg, engine)
    rows = [{k: v for k, v in r.items() if k != "round_wall_s"} for r in result.rows]
    return Finished(rows, result.summary, vectors, [r["round_wall_s"] for r in result.rows])


def largest_difference(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> float:
    """The largest absolute difference between two runs' numeric metrics, row by row."""
    return max((abs(float(x[k]) - float(y[k])) for x, y in zip(a, b, strict=True)
                for k in x if isinstance(x[k], float) and k in y), default=0.0)


def identical_replicas(vectors: dict[int, np.ndarray]) -> bool:
    first = next(iter(vectors.values()))
    return all(np.array_equal(v, first) for v in vectors.values())


def fractional_actors(out: Path, device: str, gpus: int) -> Outcome:
    share = 0.25 if device == "cuda" else 0.0
    local = finish(config(out / "local", device))
    ray_run = finish(on_ray(config(out / "ray", device), num_gpus_per_actor=share,
                            clients_per_actor=2))
    cpu = local if device == "cpu" else finish(config(out / "cpu", "cpu"))
    same = ray_run.rows == local.rows
    actors = ray_run.summary["ray_actors"]
    apart = f"differ by {largest_difference(ray_run.rows, local.rows):.3g}"
    return Outcome("fractional GPU actors", same and actors == 4,
                   f"{actors} actors × {share:g} GPU; Ray ≡ local on {device}: "
                   f"{'bit-identical' if same else apart}; "
                   f"|Δ| from CPU ≤ {largest_difference(local.rows, cpu.rows):.3g}")


def subcge_config(out: Path, device: str) -> RunConfig:
    return config(out, device, rounds=2, topology={"name": "ring", "n": 4},
                  strategy={"name": "seedflood", "estimator": "subcge", "rank": 8,
                            "lr": 1e-3, "eps": 1e-3, "batch_size": 4},
                  task={"name": "lm", "corpus": "shakespeare", "seq_len": 32,
                        "max_tokens": 20_000, "max_eval_sequences": 8},
                  model={"name": "causal_lm", "path": "tiny-llama"})


def subcge_on_device(out: Path, device: str, gpus: int) -> Outcome:
    share = 0.25 if device == "cuda" else 0.0
    first = finish(subcge_config(out / "a", device))
    again = finish(subcge_config(out / "b", device))
    grouped = {k: finish(on_ray(subcge_config(out / f"ray{k}", device),
                                num_gpus_per_actor=share, clients_per_actor=k))
               for k in (2, 4)}
    runs_same = first.rows == again.rows and all(
        np.array_equal(first.vectors[c], again.vectors[c]) for c in first.vectors)
    groupings_same = {k: g.rows == first.rows and all(
        np.array_equal(g.vectors[c], first.vectors[c]) for c in first.vectors)
        for k, g in grouped.items()}
    replicas = all(identical_replicas(r.vectors) for r in (first, *grouped.values()))
    said = "; ".join(f"{k} per actor ≡ local: {'yes' if same else 'no'}"
                     for k, same in groupings_same.items())
    return Outcome("SubCGE on " + device, runs_same and all(groupings_same.values())
                   and replicas,
                   f"two runs bit-identical: {'yes' if runs_same else 'no'}; {said}; "
                   f"replicas identical: {'yes' if replicas else 'no'}")


def largest_relative_difference(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> float:
    """The largest difference between two runs' float metrics, relative to the larger."""
    return max((abs(float(x[k]) - float(y[k])) / max(abs(float(x[k])), abs(float(y[k])), 1e-12)
                for x, y in zip(a, b, strict=True)
                for k in x if isinstance(x[k], float) and k in y), default=0.0)


def counted(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What the router counts exactly, row by row: bytes, messages, the largest edge."""
    return [(r.get("bytes"), r.get("messages"), r.get("max_edge_bytes")) for r in rows]


def push_sum_on_device(out: Path, device: str, gpus: int) -> Outcome:
    """SGP and OSGP on the one-peer exponential graph (directed, one out-peer a round),
    their clients batched on the device: Ray's 2 actors of 4 ≡ the local run bit for bit
    (the same kernels on the same device), the sequential run within batched's stated
    tolerance (1e-5 relative: the stacked kernels sum in another order), and the bytes,
    messages and largest edge equal exactly in all three."""
    share = 0.5 if device == "cuda" else 0.0
    passed, said = True, []
    for name in ("sgp", "osgp"):
        def run_of(arm: str, mode: str, name: str = name) -> RunConfig:
            return config(out / f"{name}-{arm}", device, rounds=3,
                          topology={"name": "one_peer_exponential", "n": 8},
                          strategy={"name": name, "local_steps": 2, "batch_size": 16,
                                    "lr": 0.1},
                          execution={"mode": mode})
        batched = finish(run_of("batched", "batched"))
        one_by_one = finish(run_of("sequential", "sequential"))
        ray_run = finish(on_ray(run_of("ray", "batched"), num_gpus_per_actor=share,
                                clients_per_actor=4))
        same = ray_run.rows == batched.rows
        apart = largest_relative_difference(one_by_one.rows, batched.rows)
        exact = counted(batched.rows) == counted(one_by_one.rows) == counted(ray_run.rows)
        passed = passed and same and apart <= 1e-5 and exact
        said.append(f"{name}: Ray ≡ local {'bit-identical' if same else 'DIFFER'}, "
                    f"sequential within {apart:.2g} rel., bytes "
                    f"{'equal' if exact else 'DIFFER'}")
    return Outcome("push-sum batched on " + device, passed, "; ".join(said))


def rdt_payloads(out: Path, device: str, gpus: int) -> Outcome:
    if device == "cuda" and gpus < 2:
        return Outcome("RDT over NCCL", None,
                       f"needs 2 GPUs (NCCL puts one rank per GPU); this machine has {gpus}")
    share = 1.0 if device == "cuda" else 0.0
    # the digits MLP with a hidden layer of 14 000: 75·h + 10 values ≈ 4 MB in float32
    sections = {"rounds": 4, "topology": {"name": "ring", "n": 4},
                "model": {"name": "mlp", "hidden": [14_000]},
                "eval": {"every": 0, "per_client": False}}
    runs = {how: finish(on_ray(config(out / how, device, **sections),
                               num_gpus_per_actor=share, clients_per_actor=2,
                               payload_transport=how))
            for how in ("object_store", "rdt")}
    path = runs["rdt"].summary["ray_payload_path"]
    same = runs["rdt"].rows == runs["object_store"].rows
    # round 0 warms up (the collective group, the first transfers)
    times = {how: statistics.median(r.round_s[1:]) for how, r in runs.items()}
    backend = "NCCL" if device == "cuda" else "Gloo"
    return Outcome(f"RDT over {backend}", same and path != "object store",
                   f"path: {path}; ≡ object store: {'yes' if same else 'no'}; s/round "
                   f"{times['rdt']:.3f} vs {times['object_store']:.3f} "
                   f"(rdt ÷ object store {times['rdt'] / times['object_store']:.2f})")


def defaults_on_shared_gpu(out: Path, device: str, gpus: int) -> Outcome:
    from decent.backends.ray.memory_plan import probe_apart
    from decent.run.runner import check

    share = 0.25 if device == "cuda" else 0.0
    sections = {"topology": {"name": "ring", "n": 8},
                "model": {"name": "mlp", "hidden": [14_000]},
                "eval": {"every": 0, "per_client": False}}
    local = finish(config(out / "local", device, **sections))
    raw = to_dict(config(out / "ray", device, **sections))
    cfg = from_dict({**raw, "backend": "ray",  # every other ray setting as it is by default
                     "ray": {"num_gpus_per_actor": share, "clients_per_actor": 2}})
    began = time.monotonic()
    probe_apart(cfg, check(cfg))
    probe_s = time.monotonic() - began
    ray_run = finish(cfg)
    same = ray_run.rows == local.rows
    path = ray_run.summary["ray_payload_path"]
    expected = "object store"  # actors sharing a GPU (or CPU actors under auto)
    return Outcome("defaults on shared GPU", same and path == expected,
                   f"{ray_run.summary['ray_actors']} actors × {share:g} GPU, memory plan on, "
                   f"~4 MB payloads; path: {path}; Ray ≡ local: "
                   f"{'bit-identical' if same else 'no'}; probe {probe_s:.1f} s")


def seedflood_memory(out: Path, device: str, gpus: int) -> Outcome:
    import torch

    from decent.backends.ray.memory_plan import probe
    from decent.run.runner import check

    if device != "cuda":
        return Outcome("SeedFlood memory", None, "GPU memory: CUDA only")
    cfg = config(out, device, rounds=1, topology={"name": "ring", "n": SEEDFLOOD_CLIENTS},
                 strategy={"name": "seedflood", "estimator": "subcge", "rank": 64,
                           "lr": 1e-4, "eps": 1e-3, "batch_size": 2},
                 task={"name": "rotten_tomatoes", "num_train": 256, "num_val": 0,
                       "num_test": 40, "max_length": 64, "eval_batch_size": 20},
                 model={"name": "causal_lm", "path": "smollm2-135m"},
                 eval={"every": 0, "per_client": False})
    try:
        plan = check(cfg)
    except Exception as exc:  # the shipped model or the task's data is not here
        return Outcome("SeedFlood memory", None, f"not run: {str(exc).splitlines()[0]}")
    footprint = probe(cfg, plan)
    planned = footprint.model_mb + SEEDFLOOD_CLIENTS * footprint.per_client_mb
    torch.cuda.reset_peak_memory_stats()
    finish(cfg)
    peak = torch.cuda.max_memory_allocated() / 2**20
    ratio = peak / planned
    return Outcome("SeedFlood memory", 1 / MEMORY_FACTOR <= ratio <= MEMORY_FACTOR,
                   f"{SEEDFLOOD_CLIENTS} SmolLM2-135M clients: peak {peak:.0f} MB, planned "
                   f"{planned:.0f} MB (model {footprint.model_mb:.0f} + "
                   f"{footprint.per_client_mb:.2f} per client); ratio {ratio:.2f}")


CHECKS: list[Callable[[Path, str, int], Outcome]] = [
    fractional_actors, subcge_on_device, rdt_payloads, defaults_on_shared_gpu,
    seedflood_memory, push_sum_on_device]


def run_checks(device: str, gpus: int, checks: list[Callable[..., Outcome]] | None = None,
               say: Callable[[str], None] = print) -> list[Outcome]:
    """Each check in turn, in a temporary folder, on one embedded Ray (started here unless
    one is); one that raises is a failure with its error's last line."""
    import ray

    from decent.backends.ray.session import connect, shutdown

    outcomes = []
    started_ray = False if ray.is_initialized() else connect(RayConfig())
    try:
        with tempfile.TemporaryDirectory(prefix="decent-gpu-check-") as tmp:
            for k, check_fn in enumerate(checks or CHECKS):
                began = time.monotonic()
                try:
                    outcome = check_fn(Path(tmp) / str(k), device, gpus)
                except Exception as exc:
                    last = traceback.format_exception_only(exc)[-1].strip()
                    outcome = Outcome(check_fn.__name__.replace("_", " "), False,
                                      f"raised {last}")
                outcomes.append(outcome)
                # a failure's figures at once: a run cut short never prints the table
                said = "" if outcome.passed is not False else f": {outcome.figures}"
                say(f"{outcome.name}: {verdict(outcome)} ({time.monotonic() - began:.0f} s)"
                    + said)
    finally:
        if started_ray:
            shutdown()
    return outcomes


def verdict(outcome: Outcome) -> str:
    return {True: "pass", False: "FAIL", None: "not run"}[outcome.passed]


def table(outcomes: list[Outcome], where: str) -> str:
    width = max(len(o.name) for o in outcomes)
    lines = [f"GPU acceptance on {where}", f"{'check':<{width}}  result   figures"]
    lines += [f"{o.name:<{width}}  {verdict(o):<7}  {o.figures}" for o in outcomes]
    return "\n".join(lines)


def doctor_gpu() -> int:
    """The command: 0 when every check that ran passed (or there is no GPU), 1 otherwise."""
    import torch

    if not torch.cuda.is_available():
        print("gpu check: no CUDA device here (torch.cuda.is_available() is False); "
              "nothing to check")
        return 0
    gpus = torch.cuda.device_count()
    where = f"{gpus} × {torch.cuda.get_device_name(0)}, torch {torch.__version__}"
    outcomes = run_checks("cuda", gpus)
    print(table(outcomes, where))
    print(throughput_table(where))
    return 0 if all(o.passed is not False for o in outcomes) else 1


def throughput_table(where: str, device: str = "cuda", rounds: int = 2) -> str:
    """A short slice of ``benchmarks/gpu_throughput.py``: one workload of each family,
    sequential against batched, in float32 and bfloat16 (a figure, not a pass/fail)."""
    from decent.tools import throughput

    workloads = throughput.GPU_SLICE if device == "cuda" else throughput.CPU_WORKLOADS[-1:]
    return throughput.table(throughput.run(workloads, device, rounds, say=lambda _: None),
                            where)
