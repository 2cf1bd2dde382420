"""The tutorial (docs/tutorial/your-own-strategy.md) runs as written: its files are
assembled from the page's code blocks (by their ``title``), the commands of its ``bash``
blocks run in an empty folder, and the outputs pasted on the page are what they print and
report, digit for digit (the runs are deterministic on CPU with torch_threads 1). And the
config's ``imports`` field: a module that cannot be imported is one line, exit 2."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from decent.tools.cli import main
from tests.helpers import tiny

DOC = Path(__file__).resolve().parents[1] / "docs" / "tutorial" / "your-own-strategy.md"
# a fenced block: its language, the rest of its opening line, its body
FENCE = re.compile(r"^```(\w*)([^\n]*)\n(.*?)^```$", re.M | re.S)
TITLE = re.compile(r'title="([^"]+)"')
OUTPUT = "<!-- output -->"  # before a ```text block: lines the commands print
STRATEGY_LINES = 60


def fences(page: str) -> list[tuple[str, str, str, bool]]:
    """(language, title, body, marked as output) of every fenced block of ``page``."""
    out = []
    for m in FENCE.finditer(page):
        title = TITLE.search(m.group(2))
        marked = page[:m.start()].rstrip().endswith(OUTPUT)
        out.append((m.group(1), title.group(1) if title else "", m.group(3), marked))
    return out


def page_files(page: str) -> dict[str, str]:
    """The files the page's titled blocks make: the blocks of one title, in order, each
    followed by two blank lines (as top-level definitions are)."""
    parts: dict[str, list[str]] = {}
    for lang, title, body, _ in fences(page):
        if title and lang in ("python", "yaml"):
            parts.setdefault(title, []).append(body)
    return {name: "\n\n".join(bodies) for name, bodies in parts.items()}


def commands(page: str) -> list[list[str]]:
    """Every command of the page's bash blocks (continued lines joined), as argv."""
    out = []
    for lang, _, body, _ in fences(page):
        if lang == "bash":
            for line in body.replace("\\\n", " ").splitlines():
                line = line.split(" #", 1)[0].strip()
                if line and not line.startswith("#"):
                    out.append(shlex.split(line))
    return out


def tables(markdown: str) -> list[str]:
    """The markdown tables of a text: runs of lines that start with '|'."""
    found, current = [], []
    for line in [*markdown.splitlines(), ""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            found.append("\n".join(current))
            current = []
    return found


def test_the_tutorial_runs_as_written_and_reports_the_tables_on_the_page(folder, capsys):
    page = DOC.read_text()
    files = page_files(page)
    assert set(files) == {"gradient_tracking.py", "gradient_tracking.yaml"}
    for name, text in files.items():
        (folder / name).write_text(text)
    strategy = files["gradient_tracking.py"]
    assert len(strategy.splitlines()) <= STRATEGY_LINES
    compile(strategy, "gradient_tracking.py", "exec")

    argvs = commands(page)
    assert [argv[:2] for argv in argvs] == [["decent", "run"]] * 2 + [["decent", "report"]]
    printed = []
    for argv in argvs:
        code = main(argv[1:])
        out = capsys.readouterr()
        assert code == 0, out.err
        printed.append(out.out)

    shown = [body for lang, _, body, marked in fences(page) if marked]
    assert shown, f"no block marked {OUTPUT}"
    for body in shown:
        for line in body.splitlines():
            assert line in printed[0], f"{line!r} is not what the run printed"
    report = folder / "runs" / "tutorial" / "report" / "report.md"
    made = tables(report.read_text())
    assert len(made) == 2  # the main table and the paired one
    for table in made:
        assert table in page, f"the page does not hold the report's table:\n{table}"


def write_config(tmp_path: Path, **sections) -> str:
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(tiny(tmp_path, **sections)))
    return str(path)


@pytest.mark.parametrize(("entry", "says"), [
    ("no_such_module_xyz", "no module named 'no_such_module_xyz'"),
    ("nowhere/plugin.py", "file not found: nowhere/plugin.py"),
    ("broken.py", "importing 'broken.py' failed: RuntimeError: boom"),
    ("json.py", "a module named 'json' is already imported"),
])
def test_an_import_that_fails_is_one_line_naming_imports(folder, capsys, entry, says):
    (folder / "broken.py").write_text("raise RuntimeError('boom')\n")
    (folder / "json.py").write_text("")
    path = write_config(folder, imports=[entry])
    assert main(["run", path]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error: imports: ") and says in err, err
    assert "Traceback" not in err
    assert not (folder / "runs").exists()


def test_an_imported_file_registers_its_strategy_once(folder):
    from decent.engine.config import from_dict

    (folder / "my_dsgd.py").write_text(
        "from dataclasses import dataclass\n"
        "from decent.strategies.dsgd import DSGD, DSGDConfig\n"
        "from decent.strategies.registry import STRATEGIES\n\n\n"
        "@dataclass\nclass Config(DSGDConfig):\n    name: str = 'my_dsgd'\n\n\n"
        "class MyDSGD(DSGD):\n    name, Config = 'my_dsgd', Config\n\n\n"
        "STRATEGIES.register(MyDSGD.name, Config, MyDSGD)\n")
    raw = tiny(folder, imports=["my_dsgd.py"], strategy={"name": "my_dsgd", "lr": 0.2})
    first, again = from_dict(raw), from_dict(raw)
    assert first.strategy.lr == 0.2
    assert type(first.strategy) is type(again.strategy)  # imported once: the same class
    assert first.imports == ["my_dsgd.py"]
