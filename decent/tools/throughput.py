"""Sequential against batched clients, side by side: seconds per iteration, examples per
second, peak device memory, how busy the device was and the model FLOPs utilisation.

Each workload builds one engine per execution mode on the local backend and runs their
rounds alternately (sequential, batched, sequential, …): the arms are paired round by
round, so a machine that slows down slows both; the first round of each is a warm-up and
is not counted. Figures are medians over the measured rounds.

- **busy**: the fraction of the round the device reported work, sampled from
  ``torch.cuda.utilization()`` (NVML) every 20 ms where the driver answers; None on a CPU.
- **MFU**: the model FLOPs of the round over the round's time and the device's peak for
  the dtype (dense tensor-core figures of the vendor's data sheet; None where the
  device's peak is not known). A language model's FLOPs come from the tokens it actually
  ran (:class:`TokenCount`: the attention mask's ones, padding left out) in each forward:
  2 · N_body per token, N_body the decoder's weights without its embedding tables (a
  look-up is no multiply), plus 2 · N_head per position where the LM head ran in full
  (next-token loss; classification reads k label rows only); a forward under autograd
  counts its backward too, 1× for the activations' gradients plus the trainable
  fraction for the weights' (3× a full fine-tune, ~2× LoRA). Other models: 6·N per
  training example, 4·N per zeroth-order one (two forwards), N every parameter.

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


def _round_examples(cfg: Any) -> int:
    """The examples of one round (every client's local steps)."""
    return cfg.n * getattr(cfg.strategy, "local_steps", 1) * cfg.strategy.examples_per_step()


def _example_flops(engine: Any, zeroth_order: bool) -> float:
    """The model FLOPs of one example of a model that is not a language model."""
    model = next(iter(engine.executor.group.clients.values())).model
    return (4.0 if zeroth_order else 6.0) * sum(p.numel() for p in model.parameters())


class TokenCount:
    """The FLOPs of the forwards (and backwards) of a language model, from the tokens they
    ran. Every ``transformers`` module of ``models`` (the causal LM, its decoder and, in
    OPT, the decoder's own class: the LM calls either) gets a pre-hook; the outermost one
    entered counts the attention mask's ones (every position without a mask), and a hook
    on each LM head its positions. Replicas are distinct modules: each is hooked once.
    Counts stay on the device until read (no synchronisation in the timed rounds)."""

    def __init__(self, models: list[Any]) -> None:
        from torch import nn
        from transformers import PreTrainedModel

        from decent.models.label_logits import _unwrap, backbone

        self.parts: list[tuple[Any, float]] = []  # (count, FLOPs per unit)
        self.handles: list[Any] = []
        self.depth = 0
        hooked: set[int] = set()
        for model in models:
            body = backbone(model)
            embeds = sum(p.numel() for mod in body.modules() if isinstance(mod, nn.Embedding)
                         for p in mod.parameters(recurse=False))
            n_body = sum(p.numel() for p in body.parameters()) - embeds
            every = sum(p.numel() for p in model.parameters())
            trained = sum(p.numel() for p in model.parameters() if p.requires_grad) / every
            for mod in model.modules():
                if isinstance(mod, PreTrainedModel) and id(mod) not in hooked:
                    hooked.add(id(mod))
                    self.handles += [
                        mod.register_forward_pre_hook(self._enter(2.0 * n_body, trained),
                                                      with_kwargs=True),
                        mod.register_forward_hook(self._leave, always_call=True)]
            head = _unwrap(model).get_output_embeddings()
            if head is not None and id(head) not in hooked:
                hooked.add(id(head))
                self.handles.append(head.register_forward_pre_hook(
                    self._positions(2.0 * head.weight.numel(), trained)))

    def _add(self, count: Any, per_unit: float, trained: float) -> None:
        import torch

        backward = 1.0 + trained if torch.is_grad_enabled() else 0.0
        self.parts.append((count, per_unit * (1.0 + backward)))

    def _enter(self, per_token: float, trained: float) -> Any:
        def hook(module: Any, args: tuple, kwargs: dict) -> None:
            if self.depth == 0:  # the outermost model entered: the forward's tokens
                mask = kwargs.get("attention_mask")
                ids = kwargs.get("input_ids", args[0] if args else None)
                if mask is not None:
                    self._add(mask.sum(), per_token, trained)
                elif ids is not None:
                    self._add(ids.numel(), per_token, trained)
            self.depth += 1
        return hook

    def _leave(self, module: Any, args: tuple, out: Any) -> None:
        self.depth -= 1

    def _positions(self, per_position: float, trained: float) -> Any:
        def hook(module: Any, args: tuple) -> None:
            x = args[0]
            self._add(x.numel() // x.shape[-1], per_position, trained)
        return hook

    def take(self) -> float:
        """The FLOPs counted since the last take."""
        total = sum(float(count) * per for count, per in self.parts)
        self.parts.clear()
        return total

    def close(self) -> None:
        for h in self.handles:
            h.remove()


def _token_count(engine: Any) -> TokenCount | None:
    """A token count over the engine's language models (None: not a language model)."""
    from decent.engine.stacked import is_transformers

    group = engine.executor.group
    models = [group.base_model, *(c.model for c in group.clients.values())]
    return TokenCount(models) if is_transformers(group.base_model) else None


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
        counts = {m: _token_count(engine) for m, (_, engine) in built.items()}
        flops: dict[str, list[float]] = {m: [] for m in MODES}
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
                    done = counts[mode].take() if counts[mode] is not None else 0.0
                    if r:
                        times[mode].append(spent)
                        flops[mode].append(done)
                        if sampler.busy is not None:
                            busy[mode].append(sampler.busy)
                        if device == "cuda":
                            peak = torch.cuda.max_memory_allocated() / 2**20
                            peaks[mode] = max(peaks[mode] or 0.0, peak)
            figures = {}
            for mode in MODES:
                cfg, engine = built[mode]
                examples = _round_examples(cfg)
                s = statistics.median(times[mode])
                peak = peak_tflops(device, dtype)
                # a round's FLOPs over its own time, the median of the rounds' rates
                rates = [f / t for f, t in zip(flops[mode], times[mode], strict=True)] \
                    if counts[mode] is not None else \
                    [examples * _example_flops(engine, workload.zeroth_order) / s]
                figures[mode] = Figures(
                    s, examples / s, peaks[mode],
                    statistics.median(busy[mode]) if busy[mode] else None,
                    None if peak is None else statistics.median(rates) / (peak * 1e12))
        finally:
            for mode, (_, engine) in built.items():
                if counts.get(mode) is not None:
                    counts[mode].close()
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
