"""A run directory's saved ``config.yaml``, read back (``decent resume``, ``decent verify``):
what earlier versions saved beside a part that does not declare it is dropped, and the
code it names runs only when trusted."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from decent.core.errors import ConfigError
from decent.engine.config import RunConfig, from_dict, read_yaml
from decent.engine.imports import import_plugins, not_yet_imported
from decent.engine.overrides import prune_saved


def load_saved_config(path: str | Path, trust_imports: bool = False) -> RunConfig:
    """A run directory's ``config.yaml``, as written by this or an earlier version (fields
    an earlier version saved beside a part that does not declare them are dropped).

    Its ``imports`` are code: a run directory someone else wrote could name a file it
    holds, or any installed module whose import does something. They are imported only
    with ``trust_imports``, or when this process has imported them already (the run that
    wrote the directory, going on); otherwise one line naming them."""
    data = read_yaml(Path(path))
    imports = data.get("imports") or []
    pending = not_yet_imported(imports) if isinstance(imports, list) else []
    if pending and not trust_imports:
        raise ConfigError("imports", f"{path} imports {', '.join(pending)}: code that would "
                          "run here; read it, then pass --trust-imports (a run directory "
                          "you did not write runs no code without it)")
    import_plugins(imports)
    prune_saved(data)
    fill_fields_added_since(data)
    return from_dict(data)


# Fields added after records were kept, whose default is not what the code did before
# them: (section, which of its parts the field belongs to, field, the value the code
# behaved as). A saved config holds every field of its time, so one without the field
# was made before it, that way; filling it in keeps an old record re-running (and
# resuming) as it was made.
ADDED_SINCE: tuple[tuple[str, Callable[[dict[str, Any]], bool], str, Any], ...] = (
    # SubCGE covered every Linear but the head before all_2d (Algorithm 1's) was the default
    ("strategy", lambda part: part.get("name") == "seedflood"
     and part.get("estimator", "subcge") == "subcge", "layers", "linear"),
)


def fill_fields_added_since(data: dict[str, Any]) -> None:
    for section, applies, key, before in ADDED_SINCE:
        part = data.get(section)
        if isinstance(part, dict) and key not in part and applies(part):
            part[key] = before
