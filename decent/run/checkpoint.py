"""Checkpoints: everything a run needs to continue bit-identically, committed whole and
verified before they are loaded.

Every ``checkpoint.every`` rounds the run directory gets ``checkpoint-<next round>/``:
``clients/<cid>.pt`` (each client's own model tensors, typed strategy state, optimiser,
generator and global-RNG states, a Byzantine client's attack history), ``process.pt``
(the strategy's per-process object and, when the strategy writes them, the shared frozen
weights: stored once, not per client), ``router.pt`` (messages in flight, the run's byte
counters, the clients lost for real) and, written last, ``manifest.json``: each file's
size and SHA-256, the round, the config's hash, the code version, and how many rows of
``metrics.jsonl`` precede the round (with the hash of their bytes).

A checkpoint is committed as PyTorch Distributed Checkpoint and Orbax commit theirs: its
files are written into a temporary folder and ``fsync``-ed, the manifest last, then the
folder is renamed into place (``os.replace``, atomic on one file system) and the run
directory ``fsync``-ed; only then does ``checkpoint.json`` (same procedure) name it. A run
killed at any moment, or a disk that fills up, leaves the previous checkpoint readable.
The newest ``checkpoint.keep`` checkpoints are kept.

Loading re-reads every file, checks it against the manifest, and unpickles it with
``weights_only=True`` (:mod:`decent.run.plain`): a damaged file is one line naming it,
and a planted pickle cannot run code. The simulated clock and the round's counters are in
``metrics.jsonl``; link draws, speed factors and fault decisions are functions of the
seeds and are not stored.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from decent.core.errors import ConfigError
from decent.run import plain

FORMAT = 2  # bumped whenever what a checkpoint holds changes
POINTER = "checkpoint.json"
MANIFEST = "manifest.json"
PREFIX = "checkpoint-"
METRICS = "metrics.jsonl"


@dataclass(frozen=True)
class Committed:
    """A checkpoint that verified: its folder and manifest."""

    dir: Path
    manifest: dict[str, Any]

    @property
    def next_round(self) -> int:
        return int(self.manifest["next_round"])

    @property
    def metric_rows(self) -> int:
        return int(self.manifest["metric_rows"])


# ---------------------------------------------------------------------- writing
def write(run_dir: Path, next_round: int, state: dict[str, Any], extra: dict[str, Any],
          keep: int = 2) -> None:
    """Commit ``state`` (``clients``: cid → saved client, ``process``, ``router``,
    ``lost``) as the checkpoint to resume at ``next_round``, point ``checkpoint.json`` at
    it, and keep the newest ``keep`` checkpoints."""
    name = folder_name(next_round)
    tmp = run_dir / f".{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        # no parents=True: a run directory removed mid-run is not silently re-created
        tmp.mkdir()
        (tmp / "clients").mkdir()
        files = {f"clients/{cid}.pt": store(tmp / "clients" / f"{cid}.pt", saved)
                 for cid, saved in sorted(state["clients"].items())}
        files["process.pt"] = store(tmp / "process.pt", state["process"])
        files["router.pt"] = store(tmp / "router.pt", {"router": state["router"],
                                                       "lost": state.get("lost", {})})
        rows, rows_sha = metrics_prefix(run_dir / METRICS)
        manifest = {"format": FORMAT, "next_round": next_round, "files": files,
                    "config_sha256": sha256_file(run_dir / "config.yaml"),
                    "metric_rows": rows, "metrics_sha256": rows_sha,
                    "code_version": code_version(), "torch_version": torch.__version__}
        write_durably(tmp / MANIFEST, json_bytes(manifest))
        fsync_dir(tmp / "clients")
        fsync_dir(tmp)
        final = run_dir / name
        if final.exists():  # one of the same round left by an earlier, stopped segment
            shutil.rmtree(final)
        os.replace(tmp, final)
        fsync_dir(run_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # frees what a full disk took
        raise
    replace_durably(run_dir / POINTER, json_bytes(
        {"format": FORMAT, "next_round": next_round, "dir": name, **extra}))
    prune(run_dir, next_round, keep)


def code_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("decent")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def folder_name(next_round: int) -> str:
    return f"{PREFIX}{next_round:06d}"


def store(path: Path, value: Any) -> dict[str, Any]:
    """Write ``value`` as plain data (serialised in memory first: a full disk is then an
    ``OSError`` of this file, not an error inside torch's zip writer); its size and hash."""
    buffer = io.BytesIO()
    torch.save(plain.encode(value), buffer)
    data = buffer.getbuffer()  # a view, not a copy (a shared 588 MB weight file)
    write_durably(path, data, exclusive=True)
    return {"size": data.nbytes, "sha256": hashlib.sha256(data).hexdigest()}


def json_bytes(data: Any) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()


def write_durably(path: Path, data: bytes | memoryview, exclusive: bool = False) -> None:
    """``data`` in ``path``, on the disk when this returns; a write that fails (a full
    disk) is an ``OSError`` naming ``path`` (a file object's own errors name no file)."""
    try:
        with open(path, "xb" if exclusive else "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        if exc.filename:
            raise
        raise OSError(exc.errno, exc.strerror, str(path)) from None


def replace_durably(path: Path, data: bytes) -> None:
    """``path`` holds ``data`` after this returns, or its old content if it raised."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        write_durably(tmp, data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def prune(run_dir: Path, newest: int, keep: int) -> None:
    """Keep the ``keep`` newest checkpoints up to ``newest``; drop any past it (left by a
    segment that went back to an older checkpoint)."""
    rounds = sorted(found_rounds(run_dir))
    kept = [r for r in rounds if r <= newest][-keep:]
    for r in rounds:
        if r not in kept:
            shutil.rmtree(run_dir / folder_name(r), ignore_errors=True)


def found_rounds(run_dir: Path) -> list[int]:
    out = []
    for path in run_dir.glob(f"{PREFIX}*"):
        digits = path.name[len(PREFIX):]
        if path.is_dir() and digits.isdigit():
            out.append(int(digits))
    return out


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def metrics_prefix(path: Path, rows: int | None = None) -> tuple[int, str]:
    """How many whole rows ``metrics.jsonl`` has (or the first ``rows``), and the SHA-256
    of their bytes."""
    whole = whole_rows(path)[:rows]
    return len(whole), hashlib.sha256(b"".join(whole)).hexdigest()


def whole_rows(path: Path) -> list[bytes]:
    """The lines of ``metrics.jsonl`` that were written whole (a kill can cut the last)."""
    data = path.read_bytes() if path.is_file() else b""
    return [line for line in data.splitlines(keepends=True) if line.endswith(b"\n")]


# ---------------------------------------------------------------------- checking
def problems(run_dir: Path, name: str) -> list[str]:
    """What is wrong with the checkpoint folder ``name``, one line each (none: it is
    whole)."""
    folder = run_dir / name
    where = f"{run_dir}/{name}"
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except FileNotFoundError:
        return [f"{where}: its {MANIFEST} is missing (the checkpoint was never committed "
                "or was damaged)"]
    except (OSError, ValueError) as exc:
        return [f"{where}/{MANIFEST} is unreadable ({exc})"]
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        got = manifest.get("format") if isinstance(manifest, dict) else None
        return [f"{where} was written by another version of decent (format {got}; this "
                f"one reads format {FORMAT}); resume it with that version"]
    found: list[str] = []
    if folder_name(manifest["next_round"]) != name:
        found.append(f"{where}/{MANIFEST} says round {manifest['next_round']}, its folder "
                     "another")
    for rel, want in sorted(manifest["files"].items()):
        # whole, then what resume will load: the same allow-list (a hash is no signature)
        found += file_problems(folder / rel, want) or content_problems(folder / rel, want)
    listed = set(manifest["files"]) | {MANIFEST}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_file() and rel not in listed:
            found.append(f"{path}: not in the checkpoint's manifest (a file added later)")
    config = run_dir / "config.yaml"
    if config.is_file() and sha256_file(config) != manifest["config_sha256"]:
        found.append(f"{config}: changed since the checkpoint at round "
                     f"{manifest['next_round']} was written")
    rows, rows_sha = metrics_prefix(run_dir / METRICS, manifest["metric_rows"])
    if rows < manifest["metric_rows"]:
        found.append(f"{run_dir / METRICS}: {rows} rows where the checkpoint at round "
                     f"{manifest['next_round']} needs {manifest['metric_rows']} (rows were "
                     "removed)")
    elif rows_sha != manifest["metrics_sha256"]:
        found.append(f"{run_dir / METRICS}: its rows before round {manifest['next_round']} "
                     "differ from those the checkpoint recorded (the file was edited)")
    return found


def file_problems(path: Path, want: dict[str, Any]) -> list[str]:
    if not path.is_file():
        return [f"{path}: missing"]
    size = path.stat().st_size
    if size != want["size"]:
        what = "empty" if size == 0 else "truncated" if size < want["size"] else "grown"
        return [f"{path}: {what} ({size} bytes; the manifest says {want['size']})"]
    if sha256_file(path) != want["sha256"]:
        return [f"{path}: altered (its SHA-256 differs from the manifest's)"]
    return []


def content_problems(path: Path, want: dict[str, Any]) -> list[str]:
    try:
        load(path, want)
    except ConfigError as exc:
        return [str(exc).partition(": ")[2] or str(exc)]
    return []


def read_pointer(run_dir: Path) -> dict[str, Any]:
    path = run_dir / POINTER
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError("run_dir", f"{path} is unreadable ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        got = data.get("format") if isinstance(data, dict) else None
        raise ConfigError("run_dir", f"{run_dir} was checkpointed by another version of "
                          f"decent (format {got}; this one reads format {FORMAT}); resume "
                          "it with that version")
    return data


def select(run_dir: Path, from_previous: bool = False,
           say: Any = print) -> tuple[Committed, dict[str, Any]]:
    """The checkpoint to resume from, verified, and ``checkpoint.json``'s fields: the one
    ``checkpoint.json`` names, or with ``from_previous`` the newest that verifies (each
    one passed over said in a line). One line naming the file and the fix otherwise."""
    rounds = sorted(found_rounds(run_dir), reverse=True)
    if not (run_dir / POINTER).is_file() and not rounds:
        raise ConfigError("run_dir", f"{run_dir} has no checkpoint to resume from: runs "
                          "write one every checkpoint.every rounds (0 by default); rerun "
                          "with e.g. checkpoint.every=10")
    if from_previous:
        for r in rounds:
            found = problems(run_dir, folder_name(r))
            if not found:
                info = pointer_or_empty(run_dir)
                return Committed(run_dir / folder_name(r), manifest_of(run_dir, r)), info
            say(f"resume: passing over {folder_name(r)}: {found[0]}")
        raise ConfigError("run_dir", f"{run_dir}: no checkpoint verifies; the run has to "
                          "be run again")
    info = read_pointer(run_dir)
    found = named_problems(run_dir, info)
    name = str(info.get("dir", ""))
    if found:
        older = [r for r in rounds if folder_name(r) != name]
        raise ConfigError("run_dir", found[0] + previous_hint(run_dir, older))
    return Committed(run_dir / name, manifest_of(run_dir, round_of(name))), info


def named_problems(run_dir: Path, info: dict[str, Any]) -> list[str]:
    """What is wrong with the checkpoint ``checkpoint.json`` (``info``) names: a folder
    that is missing, the folder's own problems, or a round other than the checkpoint's."""
    name = str(info.get("dir", ""))
    if not name.startswith(PREFIX) or not (run_dir / name).is_dir():
        return [f"{run_dir / POINTER} names the checkpoint folder {name!r}, which is "
                "missing"]
    found = problems(run_dir, name)
    if not found and manifest_of(run_dir, round_of(name))["next_round"] != \
            info.get("next_round"):
        found = [f"{run_dir / POINTER}: says round {info.get('next_round')}, the "
                 "checkpoint it names was written at another"]
    return found


def round_of(name: str) -> int:
    return int(name[len(PREFIX):])


def pointer_or_empty(run_dir: Path) -> dict[str, Any]:
    try:
        return read_pointer(run_dir)
    except ConfigError:
        return {}


def manifest_of(run_dir: Path, next_round: int) -> dict[str, Any]:
    return json.loads((run_dir / folder_name(next_round) / MANIFEST).read_text())


def previous_hint(run_dir: Path, older: list[int]) -> str:
    good = next((r for r in older if not problems(run_dir, folder_name(r))), None)
    if good is None:
        return "; no other checkpoint verifies: the run has to be run again"
    return (f"; `decent resume --from-previous {run_dir}` goes back to "
            f"{folder_name(good)}, the newest that verifies")


# ---------------------------------------------------------------------- reading
def read(checkpoint: Committed) -> dict[str, Any]:
    """The state of a verified checkpoint, on the CPU (restoring moves it to the device).
    Each file is checked again as it is read (it may have changed since it verified)."""
    folder = checkpoint.dir
    files = checkpoint.manifest["files"]
    clients = {int(Path(rel).stem): load(folder / rel, want)
               for rel, want in files.items() if rel.startswith("clients/")}
    routed = load(folder / "router.pt", files["router.pt"])
    return {"clients": clients, "process": load(folder / "process.pt", files["process.pt"]),
            "router": routed["router"],
            "lost": {int(c): int(r) for c, r in routed["lost"].items()}}


def load(path: Path, want: dict[str, Any]) -> Any:
    data = path.read_bytes()
    if len(data) != want["size"] or hashlib.sha256(data).hexdigest() != want["sha256"]:
        raise ConfigError("run_dir", f"{path}: changed while it was read; resume again")
    try:
        stored = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise ConfigError("run_dir", f"{path}: refused: it holds Python objects other than "
                          "tensors and plain data, which decent never writes (loading it "
                          "could run code); do not resume this run directory") from None
    except (RuntimeError, EOFError, ValueError) as exc:
        reason = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ConfigError("run_dir", f"{path}: unreadable ({reason})") from None
    key = plain.keys_problem(path, stored)
    if key is not None:
        raise plain.refused(str(path), key, "a key this file never holds")
    return plain.decode(stored, str(path))
