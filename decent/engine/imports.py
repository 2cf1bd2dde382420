"""Components written outside decent: the modules a config's ``imports`` lists.

A strategy, task or model kept in a file of its own registers itself when its module is
imported (``STRATEGIES.register(name, Config, cls)`` at the end of the file). A config
names such modules in ``imports`` — a module Python can import (installed, or on
``PYTHONPATH``) or the path of a ``.py`` file (relative to the directory decent runs in)
— and :func:`import_plugins` imports them before the config's components are validated,
and again in every process that builds clients (a Ray actor), so that ``decent run``
runs the component with no edit to the package.

A file is imported as a module named after it (``gradient_tracking.py`` →
``gradient_tracking``), once per process: naming it again returns the same module, so
its classes stay the same objects. A name already taken by another module is refused.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

from decent.core.errors import ConfigError

# the files imported by import_plugins in this process: module name → resolved path
_FILES: dict[str, Path] = {}


def import_plugins(names: Iterable[str]) -> list[ModuleType]:
    """Import every module or ``.py`` file of ``names`` (in order) and return them; a
    module that cannot be imported is one :class:`ConfigError` line on ``imports``."""
    if isinstance(names, (str, dict)) or not isinstance(names, Iterable):
        raise ConfigError("imports", f"must be a list, e.g. imports: [my_strategy.py] (got "
                          f"{names!r})")
    return [_import(str(name)) for name in names]


def _import(name: str) -> ModuleType:
    if not name.strip():
        raise ConfigError("imports", "an entry is empty; give a module name or the path of "
                          "a .py file")
    try:
        if name.endswith(".py"):
            return _import_file(name)
        return importlib.import_module(name)
    except ConfigError:
        raise
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            raise ConfigError("imports", f"no module named {name!r}: give a module Python "
                              "can import (installed, or on PYTHONPATH) or the path of a "
                              ".py file") from None
        raise ConfigError("imports", f"importing {name!r} failed: {_reason(exc)}") from None
    except Exception as exc:  # anything the module's own code raises
        raise ConfigError("imports", f"importing {name!r} failed: {_reason(exc)}") from None


def _import_file(name: str) -> ModuleType:
    path = Path(name).expanduser().resolve()
    if not path.is_file():
        raise ConfigError("imports", f"file not found: {name} (a path is relative to the "
                          f"directory decent runs in: {Path.cwd()})")
    module_name = path.stem
    known = sys.modules.get(module_name)
    if known is not None and _FILES.get(module_name) == path:
        return known  # imported already: the same classes
    if known is not None and module_name not in _FILES:
        raise ConfigError("imports", f"{name}: a module named {module_name!r} is already "
                          f"imported ({getattr(known, '__file__', None) or 'built in'}); "
                          "rename the file")
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses look their module up while it runs
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        _FILES.pop(module_name, None)
        raise
    _FILES[module_name] = path
    return module


def not_yet_imported(names: Iterable[str]) -> list[str]:
    """The entries of ``names`` this process has not imported yet (a module not in
    ``sys.modules``, a file not loaded from that path): what importing them would run."""
    out = []
    for name in map(str, names):
        if name.endswith(".py"):
            path = Path(name).expanduser().resolve()
            if _FILES.get(path.stem) != path:
                out.append(name)
        elif name not in sys.modules:
            out.append(name)
    return out


def _reason(exc: BaseException) -> str:
    first = (str(exc).splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def file_modules(names: Iterable[str]) -> list[ModuleType]:
    """The modules of the ``.py`` files among ``names`` (imported now if they were not):
    what a Ray driver sends by value, since another process may not find their files."""
    return [module for name, module in zip(names, import_plugins(names), strict=True)
            if str(name).endswith(".py")]
