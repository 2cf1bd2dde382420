"""Damaged checkpoints, as a class: every file kind of every strategy's checkpoint,
damaged in every way a real machine leaves files (missing, empty, truncated, one byte
flipped, stale: from an older checkpoint or an edited round), is refused by `decent
resume` in one line naming the file — exit 2, nothing on disk changed — and `decent
resume --from-previous` goes back to the newest checkpoint that verifies and ends as the
run that never stopped, bit for bit. A checkpoint is data: every gadget an attacker with
write access could plant (a pickle that runs code, a class name that walks to a stdlib
class with side effects, an unknown key, an undeclared field, a tensor subclass) is
refused by `decent verify` and `decent resume`, the victim file untouched."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch

from decent.core import snapshot
from decent.engine.config import from_dict
from decent.run import checkpoint, plain
from decent.run.runner import resume, run
from decent.strategies.registry import STRATEGIES
from decent.tools.cli import main
from tests.helpers import run_capturing
from tests.test_checkpoint import config, steady, stopped_copy

NEWEST, OLDER = "checkpoint-000004", "checkpoint-000002"


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """One finished run per strategy (6 rounds, checkpoints at rounds 2 and 4), made on
    first use, with its final client vectors."""
    runs: dict[str, tuple] = {}

    def get(name: str) -> tuple:
        if name not in runs:
            cfg = from_dict(config(tmp_path_factory.mktemp(name), name))
            result, vectors = run_capturing(run, cfg, cfg)
            runs[name] = (cfg, result, vectors)
        return runs[name]

    return get


def stopped_as(run_dir: Path, tag: str) -> Path:
    """A stopped copy of ``run_dir`` of its own (tests share the finished runs)."""
    path = run_dir.parent / f".{run_dir.name}-{tag}.partial"
    shutil.copytree(stopped_copy(run_dir), path)
    shutil.rmtree(run_dir.parent / f".{run_dir.name}-killed.partial")
    return path


def flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def edit_json(path: Path, **fields) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


# what is done to a stopped run directory → words the one line must hold
Damage = Callable[[Path], None]
FILE_KINDS = ("clients/1.pt", "process.pt", "router.pt", "manifest.json")
DAMAGES: dict[str, tuple[Damage, str]] = {}
for rel in FILE_KINDS:
    DAMAGES[f"{rel} missing"] = (lambda d, rel=rel: (d / NEWEST / rel).unlink(), "missing")
    DAMAGES[f"{rel} empty"] = (lambda d, rel=rel: (d / NEWEST / rel).write_bytes(b""),
                               "empty" if rel != "manifest.json" else "unreadable")
    DAMAGES[f"{rel} truncated"] = (lambda d, rel=rel: truncate(d / NEWEST / rel),
                                   "truncated" if rel != "manifest.json" else "unreadable")
    DAMAGES[f"{rel} one byte flipped"] = (lambda d, rel=rel: flip(d / NEWEST / rel),
                                          "altered" if rel != "manifest.json" else "")
    if rel != "manifest.json":  # stale: the same file of the older checkpoint
        DAMAGES[f"{rel} stale"] = (lambda d, rel=rel: shutil.copy(d / OLDER / rel,
                                                                  d / NEWEST / rel), "")
DAMAGES.update({
    "checkpoint.json round edited": (
        lambda d: edit_json(d / "checkpoint.json", next_round=5), "says round 5"),
    "checkpoint.json emptied": (lambda d: (d / "checkpoint.json").write_text(""),
                                "unreadable"),
    "manifest round edited": (
        lambda d: edit_json(d / NEWEST / "manifest.json", next_round=3), "says round 3"),
    "checkpoint folder from an older round": (
        lambda d: (shutil.rmtree(d / NEWEST), shutil.copytree(d / OLDER, d / NEWEST)),
        "says round 2"),
    "metrics.jsonl cut before the checkpoint": (
        lambda d: (d / "metrics.jsonl").write_text(
            "".join((d / "metrics.jsonl").read_text().splitlines(keepends=True)[:3])),
        "3 rows where the checkpoint at round 4 needs 4"),
    "metrics.jsonl row edited": (
        lambda d: (d / "metrics.jsonl").write_text(
            (d / "metrics.jsonl").read_text().replace('"round": 1,', '"round": 1, "x": 0,')),
        "edited"),
    "config.yaml changed": (
        lambda d: (d / "config.yaml").write_text((d / "config.yaml").read_text()
                                                 .replace("seed: 0", "seed: 1")),
        "changed since"),
    "a file added": (lambda d: (d / NEWEST / "clients" / "99.pt").write_bytes(b"x"),
                     "not in the checkpoint's manifest"),
})


def tree(path: Path) -> dict[str, str]:
    return {p.relative_to(path).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def one_line(capsys, *argv: str, what: str = "") -> str:
    code = main(list(argv))
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, (what, err)
    return err


@pytest.mark.parametrize("name", STRATEGIES.names)
def test_every_damaged_file_is_one_line_and_changes_nothing(tmp_path, finished, name,
                                                            capsys):
    _, result, _ = finished(name)
    first = stopped_copy(result.run_dir)
    whole = tree(first)
    shutil.rmtree(first)
    for what, (damage, words) in DAMAGES.items():
        stopped = stopped_copy(result.run_dir)
        damage(stopped)
        before = tree(stopped)
        if before == whole:  # a stale file with the same bytes (state that never changes)
            assert what.endswith("stale"), what
            shutil.rmtree(stopped)
            continue
        err = one_line(capsys, "resume", str(stopped), what=what)
        assert words in err, (what, err)
        # the file it names, and where it can go back to
        named = "checkpoint.json" if what.startswith("checkpoint.json") else \
            "metrics.jsonl" if what.startswith("metrics") else \
            "config.yaml" if what.startswith("config") else NEWEST
        assert named in err, (what, err)
        if named != "checkpoint.json" and not what.startswith(("metrics", "config")):
            assert f"--from-previous {stopped}` goes back to {OLDER}" in err, (what, err)
        assert tree(stopped) == before, what
        assert not (stopped.parent / stopped.name[1:-len(".partial")]).exists()
        shutil.rmtree(stopped)


@pytest.mark.parametrize("name", ["dsgd", "seedflood", "dso"])
def test_from_previous_ends_as_the_run_that_never_stopped(finished, name, capsys):
    """The newest checkpoint damaged (a byte of a client's file flipped): back to the one
    before it, two rounds earlier, and the same run to the end."""
    cfg, full, full_vectors = finished(name)
    stopped = stopped_copy(full.run_dir)
    flip(stopped / NEWEST / "clients" / "1.pt")
    resumed, vectors = run_capturing(partial(resume, from_previous=True), cfg, stopped)
    assert f"resume: passing over {NEWEST}: " in capsys.readouterr().out
    assert steady(resumed.rows) == steady(full.rows)
    for cid, vec in full_vectors.items():
        np.testing.assert_array_equal(vectors[cid], vec)
    # the damaged newer checkpoint was replaced by the one the resumed run wrote
    assert not checkpoint.problems(resumed.run_dir, NEWEST)


def test_with_no_checkpoint_that_verifies_from_previous_is_one_line(finished, capsys):
    _, result, _ = finished("dsgd")
    stopped = stopped_as(result.run_dir, "none-verifies")
    for folder in (NEWEST, OLDER):
        (stopped / folder / "process.pt").unlink()
    before = tree(stopped)
    err = one_line(capsys, "resume", "--from-previous", str(stopped))
    assert "no checkpoint verifies" in err
    assert tree(stopped) == before


class Planted:
    """Unpickling this runs code: it writes the file ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "ran"))


class Sub(torch.Tensor):
    """A tensor subclass (its methods could run anything when the tensor is used)."""


def tagged(kind: str, **fields) -> dict:
    return {plain.TAG: kind, **fields}


def closer(victim: Path) -> dict:
    """The attribute-walk gadget: a name that reaches tempfile's closer through a decent
    module that imports tempfile; built, it deletes ``victim`` when it is discarded."""
    return tagged("dataclass", **{
        "class": "decent.backends.ray.memory_plan:tempfile._TemporaryFileCloser",
        "fields": {"file": 1, "name": str(victim), "delete": True}})


def edit_client(key: str, value) -> Callable[[dict, Path], None]:
    def edit(stored: dict, victim: Path) -> None:
        stored[key] = value(victim) if callable(value) else value
    return edit


def state_field(name: str, value) -> Callable[[dict, Path], None]:
    """A field set on the client's state object (a DSGD state dataclass)."""
    def edit(stored: dict, victim: Path) -> None:
        cls, fields = stored["state"][snapshot.DATACLASS]
        stored["state"] = {snapshot.DATACLASS: (cls, {**fields, name: value})}
    return edit


# a stored client file edited as an attacker with write access would → (key named,
# words of the line); each planted with the manifest recomputed (a hash is no signature)
GADGETS = {
    "reduce pickle": (None, "", "could run code"),
    "attribute walk in an extra key": (edit_client("x", closer), "'x'", "never holds"),
    "attribute walk as the state": (edit_client("state", closer), "'state'",
                                    "_TemporaryFileCloser is not one a component registered"),
    "attribute walk in a message": (None, "", "not one a component registered"),
    "unknown plain key": (edit_client("notes", [1, 2]), "'notes'", "never holds"),
    "undeclared dataclass field": (state_field("evil", 1), "'state.evil'",
                                   "'evil', which DSGDState does not declare"),
    "unknown class name": (edit_client("attack", {snapshot.OBJECT: (
        tagged("class", name="os:system"), {})}), "'attack.__object__[0]'",
        "os:system is not one"),
    "tensor subclass": (edit_client("model", lambda v: {"w": torch.zeros(2).as_subclass(Sub)}),
                        "", "could run code"),
}


def plant(stopped: Path, gadget: str, victim: Path) -> Path:
    edit, _, _ = GADGETS[gadget]
    target = stopped / NEWEST / ("process.pt" if gadget == "reduce pickle" else
                                 "router.pt" if gadget == "attribute walk in a message"
                                 else "clients/1.pt")
    stored = torch.load(target, weights_only=True)
    if gadget == "reduce pickle":
        stored = {"shared": Planted(victim)}
    elif gadget == "attribute walk in a message":
        stored["router"]["ready"] = {0: [closer(victim)]}
    else:
        edit(stored, victim)
    torch.save(stored, target)
    manifest = json.loads((stopped / NEWEST / "manifest.json").read_text())
    data = target.read_bytes()
    manifest["files"][target.relative_to(stopped / NEWEST).as_posix()] = {
        "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (stopped / NEWEST / "manifest.json").write_text(json.dumps(manifest))
    return target


@pytest.mark.parametrize("gadget", GADGETS)
def test_a_planted_gadget_is_refused_by_verify_and_resume(tmp_path, finished, capsys,
                                                          gadget):
    """Every gadget: verify names the file and the key (exit 1), resume refuses it in one
    line (exit 2), nothing on disk changes and the victim file is intact."""
    _, result, _ = finished("dsgd")
    stopped = stopped_as(result.run_dir, gadget.replace(" ", "-"))
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    target = plant(stopped, gadget, victim)
    _, key, words = GADGETS[gadget]
    before = tree(stopped)
    assert main(["verify", str(stopped)]) == 1
    out = capsys.readouterr().out
    assert f"{target}: refused" in out and key in out and words in out, out
    err = one_line(capsys, "resume", str(stopped), what=gadget)
    assert f"{target}: refused" in err and key in err and words in err, err
    assert victim.read_text() == "mine"
    assert tree(stopped) == before


def test_a_stored_class_must_be_registered_and_keep_its_declared_fields(tmp_path):
    from decent.core.errors import ConfigError
    from decent.core.storable import storable

    with pytest.raises(ConfigError, match="os:system is not one a component registered"):
        plain.decode(tagged("class", name="os:system"), "x.pt")
    with pytest.raises(TypeError, match="stores only registered classes"):
        plain.encode(Path)

    class Kept:
        def __init__(self) -> None:
            self.memory = {}
            self.extra = 1

    storable(Kept, fields=("memory",))
    with pytest.raises(TypeError, match="keeps extra, which its registration"):
        plain.encode(snapshot.capture({"k": Kept()}))


def test_a_user_module_strategy_resumes_bit_identically(tmp_path, folder):
    """The tutorial's strategy, registered from a file of one's own through imports:: its
    state class is registered with it, and its run resumes as the run that never stopped.
    (``folder``: the imported file and what it registers are forgotten after.)"""
    from tests.test_tutorial import DOC, page_files

    (tmp_path / "gradient_tracking.py").write_text(
        page_files(DOC.read_text())["gradient_tracking.py"])
    raw = config(tmp_path, "dsgd")
    raw["imports"] = ["gradient_tracking.py"]
    raw["strategy"] = {"name": "gradient_tracking", "lr": 0.1}
    cfg = from_dict(raw)
    full, full_vectors = run_capturing(run, cfg, cfg)
    assert main(["verify", str(full.run_dir)]) == 0
    resumed, vectors = run_capturing(resume, cfg, stopped_copy(full.run_dir))
    assert steady(resumed.rows) == steady(full.rows)
    for cid, vec in full_vectors.items():
        np.testing.assert_array_equal(vectors[cid], vec)


def test_verify_names_each_problem_in_a_line(finished, capsys):
    _, result, _ = finished("dsgd")
    assert main(["verify", str(result.run_dir)]) == 0
    assert "ok (6 of 6 rounds; 2 checkpoint(s), newest at round 4; summary consistent" \
        in capsys.readouterr().out
    broken = result.run_dir.parent / "broken"
    shutil.copytree(result.run_dir, broken)
    truncate(broken / OLDER / "router.pt")
    summary = json.loads((broken / "summary.json").read_text())
    (broken / "summary.json").write_text(json.dumps({**summary, "bytes_total": 1}))
    assert main(["verify", str(broken)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2, lines
    assert f"{broken / OLDER / 'router.pt'}: truncated" in lines[0]
    assert "summary.json: bytes_total is 1, the rows give" in lines[1]
    rows = (broken / "metrics.jsonl").read_text().splitlines(keepends=True)
    (broken / "metrics.jsonl").write_text("".join(rows[:5]))
    assert main(["verify", str(broken)]) == 1
    out = capsys.readouterr().out
    assert "metrics.jsonl: 5 rows; the run has 6 rounds" in out
    assert "verify: " in out and "Traceback" not in out


def test_a_run_directorys_imports_run_only_when_trusted(tmp_path, finished, capsys,
                                                        monkeypatch):
    """A run directory whose config.yaml names code (a .py file it holds, or any module
    whose import does something), every hash recomputed: `verify` and `resume` import
    nothing and say so in one line; with --trust-imports the user has read it, and it
    runs."""
    from decent.engine import imports

    monkeypatch.setattr(imports, "_FILES", {})  # what the trusted import loads, forgotten
    _, result, _ = finished("dsgd")
    stopped = stopped_as(result.run_dir, "planted-import")
    marker = tmp_path / "ran.txt"
    code = stopped / "plugin_planted.py"
    code.write_text(f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n")
    config = stopped / "config.yaml"
    config.write_text(config.read_text().replace("imports: []", f"imports:\n- {code}"))
    digest = hashlib.sha256(config.read_bytes()).hexdigest()
    for folder in (NEWEST, OLDER):
        edit_json(stopped / folder / "manifest.json", config_sha256=digest)
    assert main(["verify", str(stopped)]) == 1
    out = capsys.readouterr().out
    assert f"imports: {config} imports {code}: code that would run here" in out
    err = one_line(capsys, "resume", str(stopped))
    assert "--trust-imports" in err and not marker.exists()
    assert main(["verify", str(stopped), "--trust-imports"]) == 0
    assert marker.read_text() == "ran"
    sys.modules.pop("plugin_planted", None)
