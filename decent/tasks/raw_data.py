"""Task data as every source returns it: raw rows and raw documents, before any tokenization.

The sources (``task.source``) are

* ``local``: JSONL files under ``task.data_dir`` (:mod:`decent.tasks.local_files`);
* ``package``: data files shipped inside a pip package (:mod:`decent.tasks.packages`);
* ``hub``: the Hugging Face hub through :func:`datasets.load_dataset` (:mod:`decent.tasks.hub`);
* ``auto``: ``data_dir`` if given, else the package if the task has one and it is
  installed, else the hub.

Nothing is cached on disk: the data are small (the largest, SST-2 train, is 67 349 rows) and
each loader is called once per process.
"""

from __future__ import annotations

from dataclasses import dataclass

from decent.core.errors import ConfigError

SOURCES = ("auto", "hub", "local", "package")


def check_source(source: str) -> None:
    if source not in SOURCES:
        raise ConfigError("task.source", f"unknown source {source!r}; choose one of: "
                          f"{', '.join(SOURCES)}")


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
