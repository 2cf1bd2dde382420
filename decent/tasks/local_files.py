"""Classification rows from local JSONL files (``task.source=local``), and label/row
normalisation.

A task folder is laid out as ``<data_dir>/<task>/train.jsonl`` plus a held-out
``dev.jsonl`` / ``validation.jsonl`` / ``val.jsonl`` (the GLUE and SuperGLUE file names);
``data_dir`` may also point at the task folder itself. Every row becomes the task's text
fields plus ``"label": int``, with the label normalised to the task's label order
(:attr:`decent.tasks.catalog.TaskSpec.label_names`), whether the file wrote an int, a JSON
bool or a label name. Every problem with the files is a :class:`ConfigError` naming the
file, the line and the fix.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from decent.core.errors import ConfigError
from decent.tasks.catalog import TaskSpec
from decent.tasks.raw_data import ClassificationData

# Held-out file names accepted in a local task folder, in order of preference: GLUE
# writes dev.tsv, SuperGLUE val.jsonl, the Hugging Face hub calls the split validation.
EVAL_FILES = ("dev.jsonl", "validation.jsonl", "val.jsonl")


def normalise_label(value: Any, name: str, spec: TaskSpec, where: str,
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


def normalise_row(raw: Any, name: str, spec: TaskSpec, where: str) -> dict:
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
    row["label"] = normalise_label(raw["label"], name, spec, where)
    return row


def read_jsonl(path: Path, name: str, spec: TaskSpec) -> list[dict]:
    """The normalised rows of one JSONL file (blank lines skipped)."""
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
            for one in (spec.expand(raw) if spec.expand and isinstance(raw, dict) else [raw]):
                rows.append(normalise_row(one, name, spec, where))
    if not rows:
        raise ConfigError("task.data_dir", f"{path} has no rows")
    return rows


def load_local(name: str, spec: TaskSpec, data_dir: Path) -> ClassificationData:
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
        rows = read_jsonl(eval_path, name, spec)
        return ClassificationData(rows, None, list(spec.label_names),
                                  f"data_dir {eval_path} (no train.jsonl: all splits carved "
                                  "from it)")
    train = read_jsonl(train_path, name, spec)
    held_out = read_jsonl(eval_path, name, spec) if eval_path is not None else None
    where = f"data_dir {train_path}" + (f" + {eval_path.name}" if eval_path else "")
    return ClassificationData(train, held_out, list(spec.label_names), where)
