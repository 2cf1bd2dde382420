"""Labelled rows for the prompted classification tasks, from whichever source is asked for.

:func:`load_classification` returns, for ``sst2``, ``rte``, ``boolq``, ``rotten_tomatoes``
or ``bbc_news``, rows made of the task's text fields plus ``"label": int``, with labels
normalised to one fixed order per task (:attr:`decent.tasks.catalog.TaskSpec.label_names`),
whatever the source wrote (ints, bools or names). It picks the source (``task.source``,
see :mod:`decent.tasks.raw_data`) and hands over to the loader of
:mod:`decent.tasks.local_files`, :mod:`decent.tasks.packages` or :mod:`decent.tasks.hub`.

Every problem a user can cause is a :class:`ConfigError` naming the config field and the fix.
"""

from __future__ import annotations

from pathlib import Path

from decent.core.errors import ConfigError
from decent.tasks.catalog import CATALOG, CLASSIFICATION_TASKS
from decent.tasks.hub import load_hub
from decent.tasks.local_files import load_local
from decent.tasks.packages import package_dir, pip_command
from decent.tasks.raw_data import ClassificationData, check_source


def load_classification(name: str, source: str = "auto",
                        data_dir: str | None = None) -> ClassificationData:
    """Rows of classification task ``name`` from ``source`` (see the module docstring)."""
    if name not in CATALOG:
        raise ConfigError("task.name", f"unknown classification task {name!r}; choose one of: "
                          f"{', '.join(CLASSIFICATION_TASKS)}")
    check_source(source)
    spec = CATALOG[name]
    if source == "auto":
        if data_dir:
            source = "local"
        elif spec.package_module and (not spec.hub or package_dir(spec.package_module)):
            source = "package"  # without a hub source, a missing package is the error to show
        else:
            source = "hub"
    if source == "local":
        if not data_dir:
            raise ConfigError("task.data_dir", f"task.source=local needs task.data_dir: a folder "
                              f"with {name}/train.jsonl ({spec.local_hint})")
        return load_local(name, spec, Path(data_dir).expanduser())
    if source == "package":
        if spec.package is None or spec.package_reader is None:
            raise ConfigError("task.source", f"{name} has no package source: set task.data_dir "
                              f"to a folder with {name}/train.jsonl, or task.source=hub")
        return spec.package_reader(spec)
    if not spec.hub:
        raise ConfigError("task.source", f"{name} has no Hugging Face hub source: use "
                          f"task.source=package ({pip_command(spec.package)}) or task.data_dir")
    return load_hub(name, spec)
