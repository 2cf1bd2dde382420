"""``decent verify``: a run directory checked (checkpoints, rows, summary), or with
``--rerun`` its config run again and its rows compared (:mod:`decent.run.rerun`), or with
``--measure-tolerance`` how far its floats move measured and kept beside it
(:mod:`decent.run.tolerance_measure`)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from decent.tools.usage import TRUST_HELP, UsageError

RERUN_ONLY = ("rounds", "tolerance", "backend", "device", "cpu_kernels", "threads")


def add_verify(v: argparse.ArgumentParser) -> None:
    v.add_argument("run_dir", help="a finished or interrupted run's directory")
    v.add_argument("--trust-imports", action="store_true", help=TRUST_HELP)
    v.add_argument("--rerun", action="store_true",
                   help="run the record's config.yaml again (same seed, same backend) and "
                   "compare every metric row with its own, wall time aside: one line per "
                   "value that differs (exit 1). Exactly where the record's fingerprint "
                   "(segments.json) is this machine's; elsewhere integers and the clock "
                   "exactly and floats within the tolerance measured beside the record "
                   "(rerun_tolerance.json)")
    v.add_argument("--rounds", type=int, metavar="K",
                   help="--rerun: only the first K rounds (default: every recorded round)")
    v.add_argument("--tolerance", type=float, metavar="T",
                   help="--rerun: floats may differ by at most T times max(1, |value|) "
                   "(default: 0 where the fingerprints match, else the measured one)")
    v.add_argument("--backend", metavar="NAME",
                   help="--rerun: on this backend (local, ray) rather than the recorded "
                   "one; backends give the same rows")
    v.add_argument("--device", metavar="NAME",
                   help="--rerun: on this device (cpu, cuda) rather than the recorded "
                   "config's; device auto picks a GPU where there is one, so a record made "
                   "on a CPU reruns as it was made with --device cpu")
    v.add_argument("--cpu-kernels", metavar="NAME",
                   help="--rerun: with torch's CPU kernels NAME (avx2, avx512, default), in "
                   "a new process; default: those the record was made with (its "
                   "segments.json), else this machine's. Kernels sum in different orders: "
                   "a record made on another CPU reproduces bit for bit only with its own")
    v.add_argument("--threads", type=int, metavar="N",
                   help="--rerun: with N intra-op threads rather than the record's "
                   "torch_threads (a sum split another way: the other-machine check on "
                   "this one)")
    v.add_argument("--measure-tolerance", action="store_true",
                   help="--rerun: measure how far the record's floats move with another "
                   "thread count and each other CPU kernel set this CPU runs, and add it to "
                   "rerun_tolerance.json in the record's folder (10x the largest "
                   "difference, at least 1e-6)")
    v.add_argument("--into", metavar="FOLDER",
                   help="--measure-tolerance: the folder whose records the tolerance covers "
                   "(a folder above the record, e.g. its experiment's; default: the "
                   "record's own folder)")
    v.set_defaults(func=verify_command)


def verify_command(args: argparse.Namespace) -> int:
    if args.rerun:
        if args.into is not None and not args.measure_tolerance:
            raise UsageError("--into goes with --measure-tolerance")
        return measure_command(args) if args.measure_tolerance else rerun_command(args)
    given = [f"--{name.replace('_', '-')}" for name in (*RERUN_ONLY, "measure_tolerance", "into")
             if getattr(args, name) not in (None, False)]
    if given:
        raise UsageError(f"{given[0]} goes with --rerun")
    from decent.run.verify import verify

    found = verify(args.run_dir, trust_imports=args.trust_imports)
    for problem in found.problems:
        print(f"verify: {problem}")
    if found.problems:
        return 1
    print(f"verify: {args.run_dir}: ok ({'; '.join(found.facts)})")
    return 0


def rerun_command(args: argparse.Namespace) -> int:
    from decent.run import environment
    from decent.run.rerun import command_line, kernels_wanted, rerun

    wanted = kernels_wanted(args.run_dir, args.cpu_kernels)
    told = os.environ.get(environment.KERNELS_VARIABLE)
    if wanted is not None and told != wanted and wanted != environment.cpu_kernels():
        # torch picked its kernels when this process first ran one: a fresh process
        # told to use the record's
        print(f"rerun: with {wanted} CPU kernels (this process runs "
              f"{environment.cpu_kernels()}): in a new process", flush=True)
        argv = command_line(args.run_dir, wanted, args.rounds, args.tolerance, args.backend,
                            args.device, args.trust_imports, args.threads)
        return subprocess.run([sys.executable, "-c", "from decent.tools.cli import entry; "
                               "entry()", *argv], env=environment.with_kernels(wanted)
                              ).returncode
    found = rerun(args.run_dir, args.rounds, args.tolerance, args.backend,
                  args.trust_imports, args.device, args.cpu_kernels, args.threads)
    for line in found.lines():
        print(line)
    return 1 if found.mismatches else 0


def measure_command(args: argparse.Namespace) -> int:
    given = [f"--{name.replace('_', '-')}" for name in ("tolerance", "backend", "cpu_kernels",
                                                         "threads")
             if getattr(args, name) is not None]
    if given:
        raise UsageError(f"{given[0]} does not go with --measure-tolerance (it picks the "
                         "thread counts and kernels itself)")
    from decent.run.rerun import recorded_rows
    from decent.run.tolerance_measure import measure

    rounds = args.rounds or len(recorded_rows(Path(args.run_dir).expanduser()))
    lines, written = measure(args.run_dir, rounds, args.device, args.trust_imports, args.into)
    for line in lines:
        print(line)
    return 0 if written is not None else 1
