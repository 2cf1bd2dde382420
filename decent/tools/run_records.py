"""Finished runs as a report reads them: each run directory's flattened config, summary
and metric rows, and which config keys differ between runs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from decent.core.errors import ConfigError

IGNORED = ("name", "seed", "tracking.", "sweep.", "ray.")


@dataclass
class Run:
    path: Path
    config: dict[str, Any]  # flattened: "strategy.lr" → 0.1
    summary: dict[str, Any]
    rows: list[dict[str, Any]]


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``tree`` as dotted keys. A pluggable part inside a section (``strategy.aggregator:
    {name: trimmed_mean, trim: 0.1}``) is also its name under the part's own key
    (``strategy.aggregator`` → trimmed_mean), as it is written on the command line
    (``strategy.aggregator=mean``) and as records stored it before parts had fields."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            if prefix and isinstance(value.get("name"), str):
                out[name] = value["name"]
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = frozen(value)
    return out


def frozen(value: Any) -> Any:
    """A config value as a hashable one (lists as tuples, mappings as sorted pairs): runs
    are grouped by tuples of their values, and `strategy.betas` or `topology.edges` may
    differ between them."""
    if isinstance(value, list):
        return tuple(frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, frozen(v)) for k, v in value.items()))
    return value


def find_runs(paths: list[str]) -> list[Run]:
    runs = []
    for given in paths:
        root = Path(given)
        if not root.exists():
            raise ConfigError("paths", f"{root} does not exist")
        candidates = [root] if (root / "summary.json").is_file() else \
            sorted(p.parent for p in root.rglob("summary.json"))
        for path in candidates:
            if path.name.startswith(".") or not (path / "config.yaml").is_file():
                continue
            rows = [json.loads(line) for line in
                    (path / "metrics.jsonl").read_text().splitlines() if line.strip()]
            runs.append(Run(path, flatten(yaml.safe_load((path / "config.yaml").read_text())),
                            json.loads((path / "summary.json").read_text()), rows))
    if not runs:
        raise ConfigError("paths", f"no finished run (a folder with summary.json) under "
                          f"{', '.join(paths)}")
    return runs


def varying_keys(runs: list[Run]) -> list[str]:
    keys = sorted({k for r in runs for k in r.config})
    # a part's name is grouped by once, under the part's key (not also as its `.name`)
    aliased = {k for k in keys if k.endswith(".name") and k.removesuffix(".name") in keys}
    return [k for k in keys if not k.startswith(IGNORED) and k not in aliased
            and len({json.dumps(r.config.get(k), sort_keys=True) for r in runs}) > 1]
