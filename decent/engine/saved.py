"""A run directory's saved ``config.yaml``, read back (``decent resume``, ``decent verify``):
what earlier versions saved beside a part that does not declare it is dropped, and the
code it names runs only when trusted."""

from __future__ import annotations

from pathlib import Path

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
    return from_dict(data)
