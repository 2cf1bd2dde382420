"""``execution.compile`` against eager, side by side: the MLP quick start batched at two
client counts, one engine of each, their rounds alternated. Per arm: the first round
(the compilation's cost), then the median round and the median stacked gradient step
(the part that is compiled) over the following rounds, and compiled ÷ eager.

    python benchmarks/static_shapes.py [--device cpu|cuda] [--rounds 8] [--small]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def time_steps(into: dict[bool, list[float]]) -> None:
    """Append the seconds of every stacked gradient step to ``into[chunk.compiled]``."""
    import torch

    from decent.engine.stacked import ChunkStack

    make = ChunkStack._grad_fn

    def grad_fn(chunk: ChunkStack, task: Any) -> Callable[..., Any]:
        step = make(chunk, task)

        def run(*args: Any) -> Any:
            started = time.perf_counter()
            out = step(*args)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            into[chunk.compiled].append(time.perf_counter() - started)
            return out
        return run
    ChunkStack._grad_fn = grad_fn  # type: ignore[method-assign]


def main() -> None:
    import torch

    from decent.engine.config import from_dict
    from decent.run.runner import check, make_engine
    from decent.tools import throughput

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--rounds", type=int, default=8, help="rounds an arm (the first warms)")
    p.add_argument("--small", action="store_true", help="16 and 64 clients")
    args = p.parse_args()
    torch.set_num_threads(1)
    head = (f"{'workload':<26} {'n':>5} {'arm':>8} {'1st round':>10} {'round':>9} "
            f"{'step':>9} {'round ×':>8} {'step ×':>7}")
    print(f"device {args.device}, torch {torch.__version__}, {args.rounds} rounds an arm")
    print(head)
    steps_of: dict[bool, list[float]] = {False: [], True: []}
    time_steps(steps_of)
    for n in ((16, 64) if args.small else (256, 1024)):
        with tempfile.TemporaryDirectory(prefix="decent-capture-") as tmp:
            engines, first, rounds = {}, {}, {}
            steps = steps_of
            for arm in ("eager", "compiled"):
                raw = throughput.mlp_quickstart(n).make(Path(tmp) / arm, args.device,
                                                        "float32")
                raw["execution"] = {"mode": "batched", "chunk": n,
                                    "compile": arm == "compiled"}
                cfg = from_dict(raw)
                engines[arm] = make_engine(cfg, check(cfg))
                rounds[arm] = []
            try:
                for arm, engine in engines.items():
                    started = time.perf_counter()
                    engine.run_round(0)
                    first[arm] = time.perf_counter() - started
                steps[False].clear()
                steps[True].clear()
                for r in range(1, args.rounds):
                    for arm, engine in engines.items():  # alternated: paired rounds
                        started = time.perf_counter()
                        engine.run_round(r)
                        rounds[arm].append(time.perf_counter() - started)
            finally:
                for engine in engines.values():
                    engine.close()
            med = {arm: (statistics.median(rounds[arm]),
                         statistics.median(steps[arm == "compiled"]))
                   for arm in engines}
            for arm in engines:
                ratio = (f"{med[arm][0] / med['eager'][0]:>7.2f}× "
                         f"{med[arm][1] / med['eager'][1]:>6.2f}×")
                print(f"{'MLP quick start':<26} {n:>5} {arm:>8} {first[arm]:>9.2f}s "
                      f"{med[arm][0]:>8.4f}s {med[arm][1]:>8.4f}s {ratio}")


if __name__ == "__main__":
    main()
