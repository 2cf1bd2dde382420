"""How many tensor operations one batched iteration dispatches at two client counts: the
measure of a hot path that does whole-tensor work over the client dimension
(:mod:`decent.engine.op_count`).

Each workload is built with every client in one chunk (``execution.chunk`` ≥ n) on the
local backend; its first round warms up (the stacks are built), the second is counted.
Per region: ``chunk`` is the batched executor's stacked computation (the ±ε forwards,
the local steps, the gossip mix, the optimiser step, clipping); ``client`` the clients'
own phase code (a strategy's snapshots, message application). Kernels are the non-view,
non-draw operations (:class:`~decent.engine.op_count.OpCounter`).

``python benchmarks/op_count.py`` prints the table (``--small`` for 4 against 16).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from decent.engine.op_count import CHUNK, CLIENT, OpCounter
from decent.tools import throughput


@dataclass(frozen=True)
class Counted:
    """One workload at one client count: one round's operations by region."""

    workload: str
    n: int
    chunk: int  # kernels in the chunk region
    chunk_draws: int  # draws from the clients' own generators (theirs to make)
    client: int  # kernels in the clients' own phase code
    top: tuple[tuple[str, int], ...]  # the chunk's most frequent operations


def workloads(n: int) -> dict[str, Callable[[Path], dict[str, Any]]]:
    """The three families of the issue's table, as run configs for ``n`` clients."""
    mlp = throughput.mlp_quickstart(n)
    lora = throughput.lora_dsgd(n, "tiny-llama")
    seedflood = throughput.seedflood_subcge(n, "tiny-llama", 8)

    def one_chunk(make: Callable[..., dict[str, Any]],
                  **over: Any) -> Callable[[Path], dict[str, Any]]:
        def build(out: Path) -> dict[str, Any]:
            raw = throughput._merge(make(out, "cpu", "float32"), over)
            return {**raw, "execution": {"mode": "batched", "chunk": n}}
        return build

    # SeedFlood floods over a complete graph: one send an iteration whatever n (a ring's
    # diameter, and so its number of sends, grows with n; the chunk's work does not)
    return {"MLP quick start": one_chunk(mlp.make),
            "LoRA-DSGD tiny-llama": one_chunk(lora.make),
            "SeedFlood SubCGE tiny-llama": one_chunk(seedflood.make,
                                                     topology={"name": "complete", "n": n})}


def count(name: str, n: int) -> Counted:
    """One counted round of workload ``name`` at ``n`` clients."""
    from decent.engine.config import from_dict
    from decent.run.runner import check, make_engine

    with tempfile.TemporaryDirectory(prefix="decent-ops-") as tmp:
        cfg = from_dict(workloads(n)[name](Path(tmp)))
        engine = make_engine(cfg, check(cfg))
        try:
            engine.run_round(0)
            counter = OpCounter()
            with counter:
                engine.run_round(1)
        finally:
            engine.close()
    top = tuple(counter.names.get(CHUNK, {}).most_common(6))  # type: ignore[attr-defined]
    return Counted(name, n, counter.counts[CHUNK], counter.draws[CHUNK],
                   counter.counts[CLIENT], top)


def table(rows: list[Counted]) -> str:
    """Per workload: the chunk's kernels at each n and their ratio, the draws, and the
    clients' own kernels per client."""
    head = (f"{'workload':<30} {'n':>5} {'chunk ops':>10} {'× smallest':>10} "
            f"{'draws':>7} {'client ops/client':>18}")
    lines = [head]
    first: dict[str, int] = {}
    for r in rows:
        base = first.setdefault(r.workload, r.chunk)
        lines.append(f"{r.workload:<30} {r.n:>5} {r.chunk:>10} {r.chunk / base:>9.2f}× "
                     f"{r.chunk_draws:>7} {r.client / r.n:>18.1f}")
    return "\n".join(lines)
