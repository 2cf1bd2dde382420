"""``decent config show|schema``: a config resolved with every default, or one section's
fields, defaults and allowed values (:mod:`decent.tools.config_docs`).

A strategy, task or model of the user's own is registered by the file that defines it,
when that file is imported (:mod:`decent.engine.imports`). ``show`` imports what the
config's ``imports:`` lists, as ``decent run`` does. ``schema`` imports the files and
modules given with ``--imports`` first, so that a component of the user's own prints
exactly as decent's own do. Importing a file runs its code: ``schema`` imports only what
the command line names, never what some config lists (a config in a run directory may
not be the user's own; ``decent resume`` asks ``--trust-imports`` for that).
"""

from __future__ import annotations

from collections.abc import Sequence

from decent.core.errors import ConfigError
from decent.engine.imports import import_plugins


def config_text(action: str, target: str, overrides: Sequence[str] = (),
                imports: Sequence[str] = ()) -> str:
    """What ``decent config ACTION TARGET [overrides] [--imports X ...]`` prints; every
    bad input is one :class:`ConfigError` line."""
    if action == "show":
        if imports:  # a config names its modules itself (or an override: imports=[...])
            raise ConfigError("arguments", "--imports goes with config schema; config show "
                              "imports what the config's imports: lists")
        from decent.engine.config import load_config, to_yaml

        return to_yaml(load_config(target, list(overrides)))
    if overrides:
        raise ConfigError("arguments", f"unrecognized arguments: {' '.join(overrides)} "
                          "(config schema takes one SECTION)")
    import_plugins(list(imports))  # each file or module as a config's imports: takes it
    from decent.core.field_types import did_you_mean
    from decent.tools.config_docs import schema_text, sections

    known = sections()
    kind, _, name = target.partition(".")
    names = [s.partition(".")[2] for s in known if s.startswith(f"{kind}.")]
    if names and target not in known:
        # a typo, or a component of the user's own whose file was not imported: without
        # --imports, say how to import it, and in either case the nearest name
        after = f" after importing {', '.join(imports)}" if imports else ""
        own = "" if imports else (f"; a {kind} of your own needs --imports FILE, the .py "
                                  "file (or module) that registers it")
        raise ConfigError("section", f"unknown {kind} {name!r}{after}; choose one of: "
                          f"{', '.join(names)}{own}{did_you_mean(name, names, f'{kind}.')}")
    return schema_text(target) + "\n"
