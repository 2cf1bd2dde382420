"""The ``decent`` command line.

    decent run CONFIG.yaml [key=value ...]   run an experiment
    decent resume RUN_DIR [--from-previous]  continue a stopped run from its checkpoint
    decent verify RUN_DIR                    check a run's checkpoints, rows and summary
    decent verify --rerun RUN_DIR [--rounds K] run a record again, compare its rows
    decent verify --rerun RUN_DIR --measure-tolerance  measure how far its floats move
    decent plan SWEEP.yaml [...] --measure 2 what a sweep's grid costs here (or --record)
    decent topo NAME --n 16 [...]            describe a communication graph
    decent doctor [--gpu]                    this machine; --gpu: every GPU path, checked
    decent config show CONFIG [key=value ...] the resolved config, every default filled in
    decent config schema SECTION [--imports F] a section's fields, defaults, allowed values
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from decent.core.errors import ConfigError, StrategyError
from decent.tools.stopped import finish, said
from decent.tools.usage import TRUST_HELP, UsageError
from decent.tools.verify_command import add_verify


def _run(args: argparse.Namespace) -> int:
    from decent.engine.config import load_config
    from decent.run.runner import run

    cfg = load_config(args.config, args.overrides)
    report(run(cfg))
    return 0


def _plan(args: argparse.Namespace) -> int:
    from decent.tools.plan import plan

    configs = [a for a in args.configs if "=" not in a]
    overrides = [*(a for a in args.configs if "=" in a), *args.overrides]
    print(plan(configs, overrides, args.grid, args.seeds, args.measure, args.probe or [],
               args.record, args.save))
    return 0


def _resume(args: argparse.Namespace) -> int:
    from decent.run.runner import resume

    report(resume(args.run_dir, from_previous=args.from_previous,
                  trust_imports=args.trust_imports))
    return 0


def _doctor(args: argparse.Namespace) -> int:
    import ray
    import torch

    from decent.backends.ray.memory_plan import available_mb

    free = available_mb()
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    print(f"doctor: python {sys.version.split()[0]}, torch {torch.__version__}, "
          f"ray {ray.__version__}; {os.cpu_count()} CPUs, "
          + ("memory unknown" if free is None else f"{free:.0f} MB available")
          + f", {gpus} CUDA device(s)")
    if not args.gpu:
        return 0
    from decent.tools.gpu_check import doctor_gpu

    return doctor_gpu()


def _config(args: argparse.Namespace) -> int:
    from decent.tools.config_command import config_text

    print(config_text(args.action, args.target, args.overrides, args.imports), end="")
    return 0


def _sweep(args: argparse.Namespace) -> int:
    from decent.tools.sweep import sweep
    from decent.tools.sweep_output import closing_lines

    index = sweep(args.config, args.grid or [], args.seeds, args.overrides, args.parallel,
                  args.dir, args.metric, lambda line: print(line, flush=True), args.verbose)
    print("\n".join(closing_lines(index)))
    return 0 if all(t["status"] == "done" for t in index["trials"]) else 1


def _report(args: argparse.Namespace) -> int:
    from decent.tools.report import report as make_report

    by = None if args.by is None else [k for k in args.by.split(",") if k]
    folder = make_report(args.paths, args.metric, by, args.out, args.columns, args.paired,
                         args.at, args.facet, args.color, args.style, args.select)
    print(f"report: {folder / 'report.md'}")
    return 0


def report(result: Any) -> None:
    print(format_summary(result.summary))
    print(f"run directory: {result.run_dir}")
    offline = sorted(result.run_dir.glob("wandb/offline-run-*"))
    if offline:
        print(f"W&B (offline): wandb sync {offline[0]}")


def _topo(args: argparse.Namespace) -> int:
    from decent.topologies import TOPOLOGIES, build_topology, format_summary, summarize

    fields: dict[str, Any] = {"name": args.name, "n": args.n}
    for key in ("seed", "p", "degree", "rows", "aggregators", "weights"):
        if getattr(args, key) is not None:
            fields[key] = getattr(args, key)
    if args.round < 0:
        raise ConfigError("round", f"must be ≥ 0 (got {args.round})")
    # validated like a config's section: a flag the graph does not take is refused
    topology = build_topology(TOPOLOGIES.config(fields))
    print(format_summary(summarize(topology, args.round)))
    return 0


SUMMARY_ROWS = (
    ("strategy", "strategy", "{}"),
    ("topology", "topology", "{}"),
    ("clients", "clients", "{}"),
    ("backend", "backend", "{}"),
    ("rounds", "rounds", "{}"),
    ("final train loss", "final_loss", "{:.4f}"),
    ("GMP test accuracy", "gmp_accuracy", "{:.4f}"),
    ("GMP test loss", "gmp_loss", "{:.4f}"),
    ("GMP perplexity", "gmp_perplexity", "{:.2f}"),
    ("client accuracy (mean)", "client_accuracy_mean", "{:.4f}"),
    ("consensus distance", "consensus_distance", "{:.3e}"),
    ("DP ε (largest client)", "dp_epsilon", "{:.3f}"),
    ("bytes sent (total)", "bytes_total", "{:,}"),
    ("max bytes on one edge", "max_edge_bytes_total", "{:,}"),
    ("simulated time", "sim_time_total_s", "{:.3f} s"),
    ("  of which compute", "sim_compute_total_s", "{:.3f} s"),
    ("gradient staleness (mean)", "staleness_run", "{:.3f} steps"),
    ("time to target", "time_to_target_s", "{:.3f} s"),
    ("rounds to target", "rounds_to_target", "{}"),
    ("messages lost", "dropped_messages_total", "{:,}"),
    ("messages delayed", "delayed_messages_total", "{:,}"),
    ("messages cut off", "partitioned_messages_total", "{:,}"),
    ("Byzantine clients", "byzantine_clients", "{}"),
    ("clients present (end)", "live_clients", "{}"),
    ("messages undeliverable", "undeliverable_messages_total", "{:,}"),
    ("restarts (actor lost)", "restarts", "{}"),
    ("wall time", "wall_s", "{:.1f} s"),
    ("  per segment", "segments_wall_s", "{}"),
)


# rows left out when there is nothing to say (no compute charged, no restart)
QUIET_WHEN_NONE = ("sim_compute_total_s", "restarts")


def format_summary(summary: dict[str, Any]) -> str:
    width = max(len(label) for label, _, _ in SUMMARY_ROWS)
    lines = []
    for label, key, fmt in SUMMARY_ROWS:
        if key not in summary or (key in QUIET_WHEN_NONE and not summary[key]):
            continue
        value = summary[key]
        if key == "segments_wall_s":  # only for a resumed run: one time per segment
            if len(value) < 2:
                continue
            value = " + ".join(f"{w:.1f} s" for w in value)
        text = "not reached" if value is None else fmt.format(value)
        lines.append(f"{label:<{width}}  {text}")
    return "\n".join(lines)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad command line raises (for :func:`main` to print one line) rather
    than printing the usage block and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


# The docs page each command's help points to; `make docs` builds the site into site/.
DOCS = {
    "decent": "docs/index.md",
    "run": "docs/get-started/first-experiment.md, docs/guides/configs.md",
    "sweep": "docs/guides/sweeps-and-reports.md",
    "report": "docs/guides/sweeps-and-reports.md",
    "plan": "docs/guides/sweeps-and-reports.md",
    "resume": "docs/guides/churn-and-resume.md",
    "verify": "docs/guides/churn-and-resume.md, docs/guides/reproducibility.md",
    "doctor": "docs/guides/gpus.md",
    "topo": "docs/guides/topologies.md",
    "config": "docs/guides/configs.md, docs/guides/config-reference.md",
}


def docs_epilog(command: str) -> str:
    return f"details: {DOCS[command]} (make docs builds the site)"


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="decent", description=__doc__.split("\n\n")[0],
                      epilog=docs_epilog("decent"))
    sub = p.add_subparsers(dest="command", required=True, parser_class=OneLineParser)

    def command(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        return sub.add_parser(name, epilog=docs_epilog(name), **kwargs)

    r = command("run", help="run an experiment from a YAML config")
    r.add_argument("config", help="YAML config file (e.g. experiments/quickstart.yaml)")
    r.add_argument("overrides", nargs="*", help="key=value overrides, e.g. strategy.lr=0.1")
    r.set_defaults(func=_run)
    w = command("sweep", help="run a grid of configs × seeds on Ray Tune")
    w.add_argument("config", help="YAML config file (its sweep: section adds to --grid)")
    w.add_argument("overrides", nargs="*", help="key=value overrides for every trial")
    w.add_argument("--grid", nargs="+", metavar="KEY=V1,V2",
                   help="values to combine, e.g. strategy.lr=0.1,0.01 topology.n=16,32")
    w.add_argument("--seeds", type=int, help="seeds per combination (seed, seed+1, ...)")
    w.add_argument("--parallel", type=int, help="at most this many trials at a time")
    w.add_argument("--dir", help="sweep directory (default: <out_dir>/<name>-sweep); "
                   "the same directory again continues the sweep")
    w.add_argument("--metric", help="the metric each trial's line and the closing table "
                   "show (default: eval.target.metric, else gmp_<the task's first metric>)")
    w.add_argument("--verbose", action="store_true", help="also Ray Tune's own progress "
                   "tables and Ray's INFO log")
    w.set_defaults(func=_sweep)
    o = command("report", help="a table and plots from finished runs or sweeps")
    o.add_argument("paths", nargs="+", help="run or sweep directories (searched recursively)")
    o.add_argument("--metric", default="gmp_accuracy", help="summary metric to compare; "
                   "more, comma-separated, add a column each")
    o.add_argument("--by", help="config keys to group by, comma-separated (default: the "
                   "keys that differ between the runs)")
    o.add_argument("--columns", help="a config key whose values become columns of a "
                   "second table of the final metric, the --by keys its rows (e.g. "
                   "faults.byzantine_fraction)")
    o.add_argument("--paired", action="append", metavar="KEY=A,B",
                   help="per-seed differences B − A of the metric between the runs with "
                   "KEY=A and those with KEY=B, paired by seed within the --by groups "
                   "(repeatable), e.g. strategy.name=fedavg,spes")
    o.add_argument("--at", default="final", choices=("final", "bytes", "sim_time"),
                   help="compare paired runs at their end (final), or at equal bytes or "
                   "simulated time (the smaller budget of each pair; the other run's "
                   "curve interpolated there)")
    o.add_argument("--facet", metavar="KEY", help="plots: one panel per value of this "
                   "config key, the panels sharing their axes (e.g. task.partition)")
    o.add_argument("--color", metavar="KEY", help="plots: colour the series by the value of "
                   "this config key (default: every series its own colour and line style)")
    o.add_argument("--style", metavar="KEY", help="plots: line style and marker by the value "
                   "of this config key")
    o.add_argument("--select", choices=("val_loss",), help="add a table that chooses, in "
                   "each --by group, the configuration of lowest mean validation loss (runs "
                   "made with eval.select=val_loss) and reports its test metric at each "
                   "run's selected checkpoint")
    o.add_argument("--out", help="output folder (default: <path>/report)")
    o.set_defaults(func=_report)
    c = command("resume", help="continue a stopped run from its last checkpoint")
    c.add_argument("run_dir", help="the run's directory (runs/.<id>.partial or <id>.failed)")
    c.add_argument("--from-previous", action="store_true",
                   help="resume from the newest checkpoint that verifies (when the newest "
                   "one is damaged)")
    c.add_argument("--trust-imports", action="store_true", help=TRUST_HELP)
    c.set_defaults(func=_resume)
    add_verify(command("verify", help="check a run directory: checkpoints against their "
                       "manifests, metric rows, summary; one line per problem (exit 1)"))
    d = command("doctor", help="what this machine has; --gpu: check every GPU path")
    d.add_argument("--gpu", action="store_true",
                   help="run the GPU acceptance checks (a few minutes) and print a table "
                   "of pass / fail with figures; without a CUDA device, one line")
    d.set_defaults(func=_doctor)
    g = command("config", help="show a resolved config, or a section's fields and ranges")
    g.add_argument("action", choices=("show", "schema"),
                   help="show: CONFIG with every default filled in (what config.yaml in a "
                   "run directory holds); schema: SECTION's fields, defaults, allowed values "
                   "and meaning")
    g.add_argument("target", metavar="CONFIG|SECTION",
                   help="show: a YAML config file; schema: top, a section (ray, faults, ...) "
                   "or a component (strategy.dsgd, task.sst2, model.mlp)")
    g.add_argument("overrides", nargs="*", help="show: key=value overrides, as for run")
    g.add_argument("--imports", action="append", default=[], metavar="FILE", help="schema: "
                   "import this .py file or module first (repeatable), for a component of "
                   "your own; importing runs its code")
    g.set_defaults(func=_config)
    n = command("plan", help="what a sweep's grid costs on this machine, per method, "
                "from a measured probe or a saved record")
    n.add_argument("configs", nargs="+", metavar="CONFIG", help="sweep configs (one method "
                   "each, their sweep: grids), then key=value overrides for every cell")
    n.add_argument("--grid", nargs="+", metavar="KEY=V1,V2", help="values to combine, "
                   "added to each config's sweep: grid (as for sweep)")
    n.add_argument("--seeds", type=int, help="seeds per combination (default: the "
                   "config's sweep.seeds)")
    n.add_argument("--measure", type=int, default=0, metavar="ROUNDS",
                   help="probe each method here: its first cell at the grid's smallest "
                   "client count, ROUNDS rounds (≥ 2; the first left out) and one "
                   "evaluation, on backend local")
    n.add_argument("--probe", nargs="+", metavar="KEY=VALUE", help="overrides for the "
                   "probes only (e.g. topology.n=2 model.path=smollm2-135m)")
    n.add_argument("--record", help="price the grid from this saved record instead of "
                   "measuring (what --save wrote, e.g. on a GPU machine)")
    n.add_argument("--save", help="write the probes measured to this JSON record")
    n.set_defaults(func=_plan, overrides=[])
    t = command("topo", help="describe a topology")
    t.add_argument("name")
    t.add_argument("--n", type=int, default=16)
    t.add_argument("--seed", type=int, help="seed (random graphs; default 0)")
    t.add_argument("--p", type=float, help="edge probability (erdos_renyi)")
    t.add_argument("--degree", type=int, help="degree (random_regular)")
    t.add_argument("--rows", type=int, help="grid rows (meshgrid, torus)")
    t.add_argument("--aggregators", type=int, help="aggregators (two_tier)")
    t.add_argument("--weights", help="metropolis | uniform (default: the graph's own)")
    t.add_argument("--round", type=int, default=0, help="round (time-varying graphs)")
    t.set_defaults(func=_topo)
    return p


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line; ``key=value`` overrides may also follow the options of
    ``run``/``sweep`` (``decent sweep C.yaml --seeds 3 rounds=5``), not only the config."""
    p = parser()
    args, rest = p.parse_known_args(argv)
    stray = [a for a in rest if a.startswith("-") or "=" not in a]
    if stray or (rest and not hasattr(args, "overrides")):
        p.error(f"unrecognized arguments: {' '.join(stray or rest)}")
    if rest:
        args.overrides = [*args.overrides, *rest]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; every error a user can cause is one line on stderr and exit code 2
    (a strategy's own mistake: 1; Ctrl-C: 130, :mod:`decent.tools.stopped`)."""
    try:
        args = parse(argv)
        return args.func(args)
    except UsageError as exc:
        print(f"error: arguments: {exc}", file=sys.stderr)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
    except (KeyboardInterrupt, StrategyError) as exc:  # Ctrl-C, a strategy's own mistake
        return said(exc)
    except BrokenPipeError:  # the reader left (`decent config show C | head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # the file system refused (full disk, permissions, ...)
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"error: file system: {where}{exc.strerror or exc}", file=sys.stderr)
    return 2


def entry() -> None:
    finish(main)
