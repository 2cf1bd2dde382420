"""Sequential against batched clients, side by side: seconds per iteration, examples per
second, peak device memory, how busy the device was and the model FLOPs utilisation.

Each workload builds one engine per execution mode on the local backend and runs their
rounds alternately (sequential, batched, sequential, …): the arms are paired round by
round, so a machine that slows down slows both; the first round of each is a warm-up and
is not counted. Figures are medians over the measured rounds.

- **busy**: the fraction of the round the device reported work, sampled from
  ``torch.cuda.utilization()`` (NVML) every 20 ms where the driver answers; None on a CPU.
- **MFU**: the model FLOPs of the round (6·N·tokens per training step, 4·N·tokens per
  zeroth-order step: two forward passes; N every parameter of one client's model, tokens
  the batch's examples × the task's ``max_length`` for language models, 1 per example
  otherwise: an upper bound where batches are padded shorter) over the round's time and
  the device's peak for the dtype (dense tensor-core figures of the vendor's data sheet);
  None where the device's peak is not known.

``python benchmarks/gpu_throughput.py`` runs the table; ``decent doctor --gpu`` a short
slice of it.
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
MODES = ("sequential", "batched")
# peak dense TFLOP/s by device name and dtype (NVIDIA data sheets; SXM parts; float32 is
# TF32 on tensor cores, which torch uses for matmuls only when allowed: the non-tensor
# figure is the honest one for float32)
PEAK_TFLOPS = {"H100": {"float32": 67.0, "bfloat16": 989.0, "float16": 989.0},
               "H200": {"float32": 67.0, "bfloat16": 989.0, "float16": 989.0},
               "A100": {"float32": 19.5, "bfloat16": 312.0, "float16": 312.0}}


@dataclass(frozen=True)
class Workload:
    """One row pair of the table: a run config (``make(out, device, dtype)``) and how
    many examples and model FLOPs one round takes (``per_round(cfg, n_params)``)."""

    name: str
    make: Callable[[Path, str, str], dict[str, Any]]
    zeroth_order: bool = False
    dtypes: tuple[str, ...] = ("float32", "bfloat16")


@dataclass(frozen=True)
class Figures:
    s_per_round: float
    examples_per_s: float
    peak_mb: float | None
    busy: float | None
    mfu: float | None


@dataclass(frozen=True)
class Row:
    workload: str
    dtype: str
    sequential: Figures
    batched: Figures

    @property
    def speedup(self) -> float:
        return self.sequential.s_per_round / self.batched.s_per_round


def _tracking(out: Path) -> dict[str, Any]:
    return {"out_dir": str(out / "runs"), "progress": False, "wandb": {"mode": "disabled"}}


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        out[key] = (_merge(out[key], value) if isinstance(value, dict)
                    and isinstance(out.get(key), dict) else value)
    return out


def _from_file(path: str, out: Path, **over: Any) -> dict[str, Any]:
    raw = yaml.safe_load((ROOT / path).read_text())
    raw.pop("sweep", None)
    return {**_merge(raw, over), "tracking": _tracking(out),
            "eval": {"every": 0, "per_client": False}}


def mlp_quickstart(n: int) -> Workload:
    def make(out: Path, device: str, dtype: str) -> dict[str, Any]:
        return _from_file("experiments/quickstart.yaml", out, device=device,
                          topology={"name": "ring", "n": n})
    return Workload(f"MLP quick start, {n} clients", make, dtypes=("float32",))


def lora_dsgd(n: int, model: str) -> Workload:
    def make(out: Path, device: str, dtype: str) -> dict[str, Any]:
        return _from_file("experiments/tasks/rotten_tomatoes_smollm2_lora.yaml", out,
                          device=device, topology={"name": "ring", "n": n},
                          model={"path": model, "dtype": dtype,
                                 "lora": {"dropout": 0.0}},
                          task={"num_train": 32 * n})
    return Workload(f"LoRA-DSGD {model}, {n} clients", make)


def seedflood_subcge(n: int, model: str, rank: int) -> Workload:
    def make(out: Path, device: str, dtype: str) -> dict[str, Any]:
        return {"name": "throughput", "seed": 0, "device": device,
                "topology": {"name": "ring", "n": n},
                "strategy": {"name": "seedflood", "estimator": "subcge", "rank": rank,
                             "lr": 1e-4, "eps": 1e-3, "batch_size": 4},
                "task": {"name": "rotten_tomatoes", "num_train": 16 * n, "num_val": 0,
                         "num_test": 16, "max_length": 64, "eval_batch_size": 16},
                "model": {"name": "causal_lm", "path": model, "dtype": dtype},
                "eval": {"every": 0, "per_client": False}, "tracking": _tracking(out)}
    return Workload(f"SeedFlood SubCGE {model}, {n} clients", make, zeroth_order=True)


GPU_WORKLOADS = [seedflood_subcge(16, "smollm2-135m", 64),
                 seedflood_subcge(128, "smollm2-135m", 64),
                 lora_dsgd(16, "smollm2-135m"), lora_dsgd(64, "smollm2-135m"),
                 mlp_quickstart(1024)]
# the doctor's slice: one of each family, small
GPU_SLICE = [seedflood_subcge(16, "smollm2-135m", 64), lora_dsgd(16, "smollm2-135m"),
             mlp_quickstart(1024)]
CPU_WORKLOADS = [seedflood_subcge(16, "tiny-llama", 8), lora_dsgd(4, "tiny-llama"),
                 mlp_quickstart(256)]


class Sampler:
    """``torch.cuda.utilization()`` sampled every 20 ms while a round runs."""

    def __init__(self, device: str) -> None:
        self.device, self.samples = device, []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Sampler:
        import torch

        if self.device == "cuda":
            try:
                torch.cuda.utilization()
            except Exception:  # no NVML here: no busy figure
                return self
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        import torch

        while not self._stop.is_set():
            self.samples.append(torch.cuda.utilization() / 100)
            time.sleep(0.02)

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    @property
    def busy(self) -> float | None:
        return statistics.mean(self.samples) if self.samples else None


def _engine(raw: dict[str, Any], mode: str) -> Any:
    from decent.engine.config import from_dict
    from decent.run.runner import check, make_engine

    cfg = from_dict({**raw, "execution": {"mode": mode}})
    return cfg, make_engine(cfg, check(cfg))


def _round_flops(cfg: Any, engine: Any, zeroth_order: bool) -> tuple[float, int]:
    """The model FLOPs of one round and its examples (every client's local steps)."""
    model = next(iter(engine.executor.group.clients.values())).model
    n_params = sum(p.numel() for p in model.parameters())
    steps = getattr(cfg.strategy, "local_steps", 1)
    examples = cfg.n * steps * cfg.strategy.examples_per_step()
    tokens = examples * getattr(cfg.task, "max_length", 1)
    return (4.0 if zeroth_order else 6.0) * n_params * tokens, examples


def peak_tflops(device: str, dtype: str) -> float | None:
    import torch

    if device != "cuda":
        return None
    name = torch.cuda.get_device_name(0)
    return next((p[dtype] for key, p in PEAK_TFLOPS.items() if key in name), None)


def compare(workload: Workload, device: str, dtype: str, rounds: int = 4,
            out: Path | None = None) -> Row:
    """The workload's figures in both modes, paired round by round."""
    import torch

    with tempfile.TemporaryDirectory(prefix="decent-throughput-") as tmp:
        where = out or Path(tmp)
        built = {m: _engine(workload.make(where / m, device, dtype), m) for m in MODES}
        times: dict[str, list[float]] = {m: [] for m in MODES}
        busy: dict[str, list[float]] = {m: [] for m in MODES}
        peaks: dict[str, float | None] = dict.fromkeys(MODES)
        try:
            for r in range(rounds + 1):  # round 0 warms up
                for mode in MODES:
                    cfg, engine = built[mode]
                    if device == "cuda":
                        torch.cuda.synchronize()
                        torch.cuda.reset_peak_memory_stats()
                    with Sampler(device) as sampler:
                        began = time.perf_counter()
                        engine.run_round(r)
                        if device == "cuda":
                            torch.cuda.synchronize()
                        spent = time.perf_counter() - began
                    if r:
                        times[mode].append(spent)
                        if sampler.busy is not None:
                            busy[mode].append(sampler.busy)
                        if device == "cuda":
                            peak = torch.cuda.max_memory_allocated() / 2**20
                            peaks[mode] = max(peaks[mode] or 0.0, peak)
            figures = {}
            for mode in MODES:
                cfg, engine = built[mode]
                flops, examples = _round_flops(cfg, engine, workload.zeroth_order)
                s = statistics.median(times[mode])
                peak = peak_tflops(device, dtype)
                figures[mode] = Figures(s, examples / s, peaks[mode],
                                        statistics.median(busy[mode]) if busy[mode] else None,
                                        None if peak is None else flops / s / (peak * 1e12))
        finally:
            for _, engine in built.values():
                engine.close()
    return Row(workload.name, dtype, figures["sequential"], figures["batched"])


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.0f} %"


def table(rows: list[Row], where: str) -> str:
    """One line per workload and dtype: each mode's s/round, examples/s, peak memory,
    busy fraction and MFU, and the ratio of the two."""
    head = (f"throughput on {where} (medians; batched ÷ sequential speed-up)\n"
            f"{'workload':<42} {'dtype':<9} {'seq s':>7} {'bat s':>7} {'speed-up':>8} "
            f"{'ex/s bat':>9} {'peak MB':>8} {'busy':>6} {'MFU':>6}")
    lines = [head]
    for r in rows:
        b = r.batched
        peak = "—" if b.peak_mb is None else f"{b.peak_mb:.0f}"
        lines.append(f"{r.workload:<42} {r.dtype:<9} {r.sequential.s_per_round:>7.3f} "
                     f"{b.s_per_round:>7.3f} {r.speedup:>7.2f}× {b.examples_per_s:>9.0f} "
                     f"{peak:>8} {_pct(b.busy):>6} {_pct(b.mfu):>6}")
    return "\n".join(lines)


def run(workloads: list[Workload], device: str, rounds: int = 4,
        dtypes: tuple[str, ...] | None = None,
        say: Callable[[str], None] = print) -> list[Row]:
    rows = []
    for w in workloads:
        for dtype in w.dtypes if dtypes is None else [d for d in w.dtypes if d in dtypes]:
            try:
                rows.append(compare(w, device, dtype, rounds))
            except Exception as exc:  # a workload this machine cannot run: said, skipped
                say(f"{w.name} {dtype}: not run ({type(exc).__name__}: "
                    f"{(str(exc).splitlines() or [''])[0]})")
                continue
            say(table(rows[-1:], device).splitlines()[-1])
    return rows
