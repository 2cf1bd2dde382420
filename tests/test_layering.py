"""The package layering the folder tree shows, checked on every import statement; and the
strategy contract's promises (built once from config + graph facts, immutable)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from decent.core.errors import ConfigError
from decent.core.graph import GraphFacts
from decent.engine.config import from_dict
from decent.engine.plan import build_plan
from decent.strategies.registry import STRATEGIES
from tests.helpers import method_config

ROOT = Path(__file__).resolve().parents[1] / "decent"

BELOW_ENGINE = {"core", "models", "tasks", "zo", "compression", "strategies", "topologies",
                "network", "robust", "privacy"}
# What each package may import from decent (besides itself). Lower layers first: the
# vocabulary (core), then the building blocks, then the strategies, then orchestration.
ALLOWED = {
    "core": set(),
    "topologies": {"core"},
    "models": {"core"},
    "compression": {"core"},
    "robust": {"core"},
    "privacy": {"core"},
    "network": {"core", "topologies", "robust"},
    "tasks": {"core", "models"},
    "zo": {"core", "models"},
    "strategies": {"core", "models", "tasks", "zo", "compression", "robust", "privacy"},
    # orchestration, in four floors: the engine (config, plan, group, round loop), the
    # executors it runs on, the run services around one run, the user's tools
    "engine": BELOW_ENGINE,
    "backends": BELOW_ENGINE | {"engine"},
    "run": BELOW_ENGINE | {"engine", "backends"},
    "tools": BELOW_ENGINE | {"engine", "backends", "run"},
}
# Strategies read like the paper's algorithm box: no distribution, no graph library; and
# Ray belongs to the executors and the tools alone (the engine and everything below run
# without a cluster).
FORBIDDEN_THIRD_PARTY = {package: {"ray"} for package in ALLOWED
                         if package not in ("backends", "tools")}
FORBIDDEN_THIRD_PARTY["strategies"] = {"ray", "networkx"}


def backend_section(name: str, package: str) -> bool:
    """An executor's config section (``decent.backends.<x>.config``: plain dataclasses
    beside the executor, no Ray) is what the engine's run config and executor registry
    name: the engine may import it, and nothing else of the backends."""
    parts = name.split(".")
    return package == "engine" and len(parts) == 4 and parts[1] == "backends" and \
        parts[3] == "config"


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def package_files():
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if len(rel.parts) > 1:
            yield rel.parts[0], path


def test_every_package_has_a_layer():
    packages = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages == set(ALLOWED)


@pytest.mark.parametrize(("package", "path"), list(package_files()),
                         ids=lambda x: x if isinstance(x, str) else x.name)
def test_no_package_imports_one_above_it(package, path):
    for name in imports_of(path):
        top, _, rest = name.partition(".")
        if top == "decent":
            target = rest.partition(".")[0]
            assert target == package or target in ALLOWED[package] or \
                backend_section(name, package), f"{path.relative_to(ROOT.parent)} imports {name}"
        assert top not in FORBIDDEN_THIRD_PARTY.get(package, set()), \
            f"{path.relative_to(ROOT.parent)} imports {name}"


def test_the_ray_actors_live_beside_the_ray_backend():
    folder = ROOT / "backends" / "ray"
    assert {p.stem for p in folder.glob("*.py")} >= {"executor", "client_actor", "transport",
                                                     "placement", "memory_plan"}
    assert not (ROOT / "actors").exists()


@pytest.mark.parametrize("name", STRATEGIES.names)
def test_a_strategy_is_immutable_once_built(tmp_path, name):
    plan = build_plan(from_dict(method_config(tmp_path, name, 5)))
    strategy = plan.strategy
    with pytest.raises(AttributeError):
        strategy.cfg = None
    with pytest.raises(AttributeError):
        strategy.something_new = 1
    assert plan.topology.facts().n == 5


def ring_facts(n: int) -> GraphFacts:
    return GraphFacts(name="ring", n=n, time_varying=False, diameter=n // 2,
                      degrees=(2,) * n)


def test_seedflood_takes_its_schedule_from_the_graph_facts_it_is_built_with():
    """The diameter comes in at construction: no later step can leave it unset."""
    cfg = STRATEGIES.config({"name": "seedflood"})
    full = STRATEGIES.entry("seedflood").build(cfg, ring_facts(10))
    assert full.phases(0) == ("compute", *["forward"] * 4, "apply")  # k = D = 5 sends
    delayed = STRATEGIES.entry("seedflood").build(
        STRATEGIES.config({"name": "seedflood", "hops": 2}), ring_facts(10))
    assert delayed.phases(0) == ("compute", "forward", "apply")
    clamped = STRATEGIES.entry("seedflood").build(
        STRATEGIES.config({"name": "seedflood", "hops": 6}), ring_facts(10))
    assert clamped.phases(0) == full.phases(0)  # 6 > D = 5: D sends
    varying = GraphFacts(name="one_peer", n=8, time_varying=True, diameter=None,
                         degrees=(1,) * 8)
    with pytest.raises(ConfigError):
        STRATEGIES.entry("seedflood").build(cfg, varying)


def test_every_strategy_dispatches_phases_to_methods(tmp_path):
    """One dispatch style: each phase a strategy names is a method of that strategy."""
    for name in STRATEGIES.names:
        strategy = build_plan(from_dict(method_config(tmp_path, name, 5))).strategy
        for r in range(3):
            for phase in strategy.phases(r):
                assert callable(getattr(type(strategy), phase, None)), (name, phase)
        assert "run_phase" not in type(strategy).__dict__, name


def test_the_plan_is_built_in_one_place_and_passed_down():
    """Only the runner builds a run's plan (and ``local_engine``, the in-process engine
    tests and notebooks build from a config): nothing below falls back to its own."""
    callers = set()
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "build_plan":
                callers.add(str(path.relative_to(ROOT)))
    assert callers == {"run/runner.py", "backends/local.py"}


def test_a_run_builds_its_plan_once(tmp_path, monkeypatch):
    from decent.run import runner

    built = []
    monkeypatch.setattr(runner, "build_plan", lambda cfg: built.append(cfg) or build_plan(cfg))
    runner.run(from_dict(method_config(tmp_path, "dsgd", 4, rounds=1)))
    assert len(built) == 1


@pytest.mark.parametrize("name", STRATEGIES.names)
def test_the_platform_reads_a_strategy_config_through_strategy_config(tmp_path, name):
    """What the compute clock and the schedule filling read of a method: its batch (the
    examples one step reads) and its inner schedule, declared by StrategyConfig."""
    from decent.strategies.config import StrategyConfig

    cfg = from_dict(method_config(tmp_path, name, 4, rounds=3))
    strategy = cfg.strategy
    assert isinstance(strategy, StrategyConfig)
    assert strategy.examples_per_step() == strategy.batch_size
    inner = strategy.inner_schedule()
    if hasattr(strategy, "lr_schedule"):
        assert inner == (strategy.lr_schedule, strategy.local_steps)
        assert strategy.lr_schedule.total_steps == 3 * strategy.local_steps  # filled in
    else:
        assert inner is None


def test_a_config_that_is_not_a_strategy_config_is_one_line(tmp_path, monkeypatch):
    from dataclasses import dataclass

    from decent.core.errors import StrategyError
    from decent.core.registry import Entry

    @dataclass
    class Bare:
        name: str = "bare"

    monkeypatch.setitem(STRATEGIES._entries, "bare",
                        Entry(Bare, STRATEGIES.entry("dsgd").build))
    with pytest.raises(StrategyError, match=r"must subclass .*StrategyConfig"):
        from_dict(method_config(tmp_path, "bare", 4))


def module_imports() -> dict[str, set[str]]:
    """Each module of decent → the modules of decent it imports when it is imported (its
    top-level imports; those inside functions and TYPE_CHECKING blocks run later)."""
    modules = {}
    for path in ROOT.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = path
    graph = {}
    for name, path in modules.items():
        deps = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                deps.add(node.module)
                deps.update(f"{node.module}.{a.name}" for a in node.names)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
        graph[name] = {d for d in deps if d in modules and d != name}
    return graph


def assert_acyclic(graph: dict[str, set[str]]) -> None:
    """No module reaches itself again through ``graph`` (module → what it imports)."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        for dep in sorted(graph[module]):
            assert dep not in path, f"import circle: {' → '.join(path[path.index(dep):])} → {dep}"
            if dep not in done:
                visit(dep, [*path, dep])
        done.add(module)

    for module in sorted(graph):
        if module not in done:
            visit(module, [module])


def test_no_module_imports_itself_back_through_a_circle():
    assert_acyclic(module_imports())


def test_no_file_of_the_package_is_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in ROOT.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 400}
    assert long == {}


def declared_imports(path: Path, in_functions: bool = False) -> set[str]:
    """The modules ``path`` names outside any function: its top-level imports and those
    of ``if TYPE_CHECKING:`` blocks (a circle there is a circle in the design, and one
    edit away from a real one); with ``in_functions``, those inside functions as well."""
    names: set[str] = set()

    def walk(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if not in_functions and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                       ast.Lambda)):
                continue
            if isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                names.add(child.module)
                names.update(f"{child.module}.{a.name}" for a in child.names)
            elif isinstance(child, ast.Import):
                names.update(a.name for a in child.names)
            walk(child)

    walk(ast.parse(path.read_text()))
    return names


def file_imports(modules: dict[str, Path], in_functions: bool) -> dict[str, set[str]]:
    """Module → the modules of decent its file names (a name ``from m import x`` takes is
    the module ``m.x`` where there is one, else ``m``)."""
    return {name: {d for d in declared_imports(path, in_functions) if d in modules and d != name}
            for name, path in modules.items()}


def package_modules() -> dict[str, Path]:
    return {".".join(p.relative_to(ROOT.parent).with_suffix("").parts)
            .removesuffix(".__init__"): p for p in ROOT.rglob("*.py")}


def test_no_import_circle_among_module_level_imports_type_checking_ones_included():
    assert_acyclic(file_imports(package_modules(), in_functions=False))


def test_no_import_circle_between_files_function_level_imports_included():
    """An import deferred into a function still ties two files together: moving it to the
    top (or one refactor) makes the circle real, and each file needs the other to be
    understood. Every import a file names, wherever, counts."""
    assert_acyclic(file_imports(package_modules(), in_functions=True))


def test_the_circle_check_sees_a_type_checking_import(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                      "    from decent.a import B\n\ndef f():\n    from decent.c import D\n")
    assert declared_imports(source) == {"typing", "typing.TYPE_CHECKING", "decent.a",
                                        "decent.a.B"}
    assert declared_imports(source, in_functions=True) >= {"decent.c", "decent.c.D"}


def test_the_circle_check_finds_a_circle_through_a_function_level_import(tmp_path):
    """The shape the topologies once had: config → mixing at the top, mixing → directed
    inside a function, directed → config at the top."""
    files = {"config": "from decent.mixing import KINDS\n",
             "mixing": "KINDS = ()\ndef f():\n    from decent.directed import g\n",
             "directed": "from decent.config import C\n"}
    modules = {}
    for stem, text in files.items():
        (tmp_path / f"{stem}.py").write_text(text)
        modules[f"decent.{stem}"] = tmp_path / f"{stem}.py"
    assert_acyclic(file_imports(modules, in_functions=False))
    with pytest.raises(AssertionError, match="import circle"):
        assert_acyclic(file_imports(modules, in_functions=True))


def test_no_module_of_the_package_imports_the_strategy_api():
    """``decent.strategies.api`` gathers the names for strategies written outside decent.
    It imports the registry, which imports every method, so a method importing it would
    import itself back; the package's own modules import each name from its home."""
    users = {str(path.relative_to(ROOT)) for path in ROOT.rglob("*.py")
             if any(name == "decent.strategies.api" or name.startswith("decent.strategies.api.")
                    for name in declared_imports(path))}
    assert users == set()
