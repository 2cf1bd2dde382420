"""``decent.strategies.api``, the one import a strategy is written with: the pages that
teach writing one (the guide, the tutorial) name nothing it does not export, and its
reference page documents every name it exports.

The reference page links each name to the anchor mkdocstrings renders for it
(``#decent.strategies.api.NAME``); ``mkdocs build --strict`` refuses a link to an anchor
that is not on the page, so the docs build fails where a name is listed but not rendered,
and the test here fails where a name is exported but not listed."""

from __future__ import annotations

import ast
import builtins
import re
import subprocess
import sys
from pathlib import Path

import decent.strategies.api as api

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "guides" / "writing-a-strategy.md"
TUTORIAL = ROOT / "docs" / "tutorial" / "your-own-strategy.md"
REFERENCE = ROOT / "docs" / "reference" / "strategies-api.md"
PAGES = (GUIDE, TUTORIAL, REFERENCE)
FENCE = re.compile(r"^```(\w*)([^\n]*)\n(.*?)^```$", re.M | re.S)
SPAN = re.compile(r"`([^`]+)`")  # an inline code span (it may wrap onto the next line)
# What a strategy may take from decent, where the names a page could mean are defined:
# the strategies package (the methods' own classes aside) and the layers below it that
# the api re-exports from. A page that names one of these must find it in the api.
SOURCES = ("strategies/*.py", "core/*.py", "compression/*.py", "models/params.py",
           "robust/aggregators.py", "tasks/base.py")


def python_blocks(path: Path) -> list[str]:
    return [m.group(3) for m in FENCE.finditer(path.read_text()) if m.group(1) == "python"]


def prose_spans(path: Path) -> list[str]:
    """The inline code spans outside the fenced blocks, whitespace collapsed."""
    return [" ".join(s.split()) for s in SPAN.findall(FENCE.sub("", path.read_text()))]


def exported() -> set[str]:
    """The api's names, and the members of the modules it exports (``params.load``)."""
    names = set(api.__all__)
    for name in api.__all__:
        value = getattr(api, name)
        if isinstance(value, type(api)):
            names |= {n for n in vars(value) if not n.startswith("_")}
    return names


def methods_own_names() -> set[str]:
    """The registered methods' classes, configs and states: a page shows them as decent's
    own code (DSGD as it stands), not as something to import."""
    names = set()
    for name in api.STRATEGIES.names:
        entry = api.STRATEGIES.entry(name)
        names |= {entry.config.__name__, getattr(entry.build, "__name__", ""),
                  getattr(getattr(entry.build, "State", None), "__name__", "")}
    return names


def top_level_names(path: Path) -> set[str]:
    """The public names a module defines at its top level (not those it imports)."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if not n.startswith("_")}


def strategy_vocabulary() -> dict[str, str]:
    """name → the module that defines it, for every name of :data:`SOURCES`."""
    found: dict[str, str] = {}
    skip = methods_own_names()
    for pattern in SOURCES:
        for path in sorted((ROOT / "decent").glob(pattern)):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            if module in ("decent.strategies.api", "decent.strategies.registry"):
                continue
            for name in top_level_names(path) - skip:
                found.setdefault(name, module.removesuffix(".__init__"))
    return found


def free_names(source: str) -> set[str]:
    """The names a code block uses but neither defines nor imports: those it presumes
    imported (a snippet's placeholders too: ``client``, ``batch_size``)."""
    bound, used = set(dir(builtins)), set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name):
            (used if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).partition(".")[0] for a in node.names}
    return used - bound


def test_the_api_exports_each_name_once_and_pulls_in_neither_ray_nor_networkx() -> None:
    assert len(api.__all__) == len(set(api.__all__))
    missing = [n for n in api.__all__ if not hasattr(api, n)]
    assert not missing, missing
    # a fresh process: what importing the api imports, transitively (the layering test
    # reads each file's own imports only)
    code = ("import sys, decent.strategies.api; "
            "print(sorted({'ray', 'networkx'} & {m.partition('.')[0] for m in sys.modules}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout
    assert out.strip() == "[]", out


def test_the_pages_import_from_decent_only_the_api_and_only_what_it_exports() -> None:
    wrong = []
    importing = set()
    for page in PAGES:
        for block in python_blocks(page):
            for node in ast.walk(ast.parse(block)):  # a block that does not parse fails here
                if isinstance(node, ast.Import):
                    wrong += [f"{page.name}: import {a.name}" for a in node.names
                              if a.name.partition(".")[0] == "decent"]
                elif isinstance(node, ast.ImportFrom) and \
                        (node.module or "").partition(".")[0] == "decent":
                    importing.add(page)
                    if node.module != "decent.strategies.api":
                        wrong.append(f"{page.name}: from {node.module} import ...")
                    wrong += [f"{page.name}: {a.name} is not in decent.strategies.api"
                              for a in node.names if a.name not in api.__all__]
    assert not wrong, wrong
    assert importing == set(PAGES)  # each page shows the import


def test_every_name_the_guide_and_the_tutorial_use_is_exported() -> None:
    """A name of the strategy layers that a code block uses unimported, or that the prose
    presents in a code span (``local_steps``, ``make_optimizer(model, cfg)``), is one the
    api exports; a module path of those layers in the prose is the api's."""
    vocabulary, names = strategy_vocabulary(), exported()
    # the check sees the names the guide's toolkit section lists
    assert {"local_steps", "make_optimizer", "mixing_weights", "positive",
            "storable"} <= set(vocabulary)
    wrong = []
    for page in (GUIDE, TUTORIAL):
        for block in python_blocks(page):
            wrong += [f"{page.name}: code block uses {n} ({vocabulary[n]})"
                      for n in sorted(free_names(block)) if n in vocabulary and n not in names]
        for span in prose_spans(page):
            head = re.match(r"[A-Za-z_][\w.]*", span)
            if head is None:
                continue
            path = head.group(0)
            if path in vocabulary and path not in names:
                wrong.append(f"{page.name}: `{span}` ({vocabulary[path]})")
            module, _, last = path.rpartition(".")
            if module == "decent.strategies.api" and last not in names:
                wrong.append(f"{page.name}: `{span}` is not exported")
            elif path != "decent.strategies.api" and module != "decent.strategies.api" and \
                    path in set(vocabulary.values()) | {f"{m}.{n}" for n, m in vocabulary.items()}:
                wrong.append(f"{page.name}: `{span}`: name it from decent.strategies.api")
    assert not wrong, "\n".join(wrong)


def test_every_exported_name_is_documented_on_the_reference_page() -> None:
    page = REFERENCE.read_text()
    assert re.search(r"^::: decent\.strategies\.api$", page, re.M)
    linked = re.findall(r"\[`(\w+)`\]\(#decent\.strategies\.api\.(\w+)\)", page)
    assert all(text == anchor for text, anchor in linked), linked
    listed = [name for name, _ in linked]
    assert sorted(listed) == sorted(api.__all__), (
        f"not listed: {sorted(set(api.__all__) - set(listed))}; not exported: "
        f"{sorted(set(listed) - set(api.__all__))}; twice: "
        f"{sorted({n for n in listed if listed.count(n) > 1})}")
    nav = (ROOT / "mkdocs.yml").read_text()
    assert "reference/strategies-api.md" in nav
