"""The import layering, read from the source with ``ast``: the command line (``keepersim/cli``)
sits on top of the library, its modules import each other without a cycle, the library never
imports it, and no package reaches into another's private (``_name``) helpers. Importing the
library does not import the optional extras (pyproject.toml's ``server``, ``export``,
``plots``)."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from keepersim.cli.common import EXTRAS

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "keepersim"
CLI = "keepersim.cli"


def get_module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def iter_sources() -> Iterator[tuple[str, str]]:
    """(module name, source) of every keepersim module but the generated protobuf code."""
    for path in sorted(PACKAGE.rglob("*.py")):
        if "pb" in path.relative_to(PACKAGE).parts:
            continue
        yield get_module_name(path), path.read_text(encoding="utf-8")


def iter_imports(module: str, source: str) -> Iterator[tuple[int, str, list[str]]]:
    """(line, imported module, names taken from it) of every import of ``source``, anywhere in
    it (inside functions and ``TYPE_CHECKING`` blocks too); relative imports resolved."""
    package = module.rsplit(".", 1)[0]  # keepersim has no relative import in a package's __init__
    for node in ast.walk(ast.parse(source, module)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, []
        elif isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, target] if target else base)
            yield node.lineno, target, [alias.name for alias in node.names]


def get_package(module: str) -> str:
    """The layer a module belongs to: ``keepersim.<first part>`` (``keepersim.sim``,
    ``keepersim.chain``, ``keepersim.cli``)."""
    return ".".join(module.split(".")[:2])


def is_in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def find_library_imports_of_cli(sources: Mapping[str, str]) -> list[str]:
    """Modules outside keepersim.cli that import it."""
    return [
        f"{module}:{line}: imports {target}"
        for module, source in sources.items()
        if not is_in(module, CLI)
        for line, target, names in iter_imports(module, source)
        if is_in(target, CLI) or (target == "keepersim" and "cli" in names)
    ]


def find_private_imports(sources: Mapping[str, str]) -> list[str]:
    """``from keepersim.x import _name`` where the importer is in another package than x."""
    return [
        f"{module}:{line}: from {target} import {name}"
        for module, source in sources.items()
        for line, target, names in iter_imports(module, source)
        if is_in(target, "keepersim") and get_package(target) != get_package(module)
        for name in names
        if name.startswith("_") and not name.startswith("__")
    ]


def get_import_graph(sources: Mapping[str, str], package: str) -> dict[str, set[str]]:
    """module -> the modules of ``package`` it imports (``from p import m`` counts m when m is
    a module of ``package``)."""
    graph: dict[str, set[str]] = {m: set() for m in sources if is_in(m, package)}
    for module in graph:
        for _, target, names in iter_imports(module, sources[module]):
            for name in names:
                if f"{target}.{name}" in graph:
                    graph[module].add(f"{target}.{name}")
            if target in graph and target != module:
                graph[module].add(target)
    return graph


def find_cycle(graph: Mapping[str, set[str]]) -> list[str]:
    """One import cycle of ``graph`` as a path ``[a, b, ..., a]`` (empty: none)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str]:
        state[node] = 1
        for child in sorted(graph.get(node, ())):
            if state.get(child) == 1:
                return [*path[path.index(child) :], child]
            if child not in state:
                found = visit(child, [*path, child])
                if found:
                    return found
        state[node] = 2
        return []

    for start in sorted(graph):
        if start not in state:
            found = visit(start, [start])
            if found:
                return found
    return []


@pytest.fixture(scope="module")
def sources() -> dict[str, str]:
    return dict(iter_sources())


def test_the_cli_is_one_package_of_modules(sources: dict[str, str]) -> None:
    cli = {m for m in sources if is_in(m, CLI)}
    assert {"keepersim.cli", "keepersim.cli.common", "keepersim.cli.simulate"} <= cli
    assert not [m for m in sources if m.endswith(".cli") and m != CLI]  # no cli.py elsewhere


def test_no_import_cycle_among_cli_modules(sources: dict[str, str]) -> None:
    assert find_cycle(get_import_graph(sources, CLI)) == []


def test_the_library_never_imports_the_cli(sources: dict[str, str]) -> None:
    assert find_library_imports_of_cli(sources) == []


def test_no_private_helper_is_imported_across_packages(sources: dict[str, str]) -> None:
    assert find_private_imports(sources) == []


def test_the_checks_find_what_they_look_for() -> None:
    """The finders on made-up modules: each rule broken once, and kept once."""
    made_up = {
        "keepersim.cli": "from keepersim.cli.a import run\n",
        "keepersim.cli.a": "def run():\n    from keepersim.cli.b import x\n",
        "keepersim.cli.b": "from keepersim.cli.a import run\n",
        "keepersim.cli.c": "from keepersim.sim.run_loop import _private\n",
        "keepersim.sim.run_loop": "from keepersim.sim.scenario import _same_package\n",
        "keepersim.server.x": "import keepersim.cli.a\nfrom keepersim import cli\n",
    }
    assert find_cycle(get_import_graph(made_up, CLI)) == [
        "keepersim.cli.a",
        "keepersim.cli.b",
        "keepersim.cli.a",
    ]
    assert find_private_imports(made_up) == [
        "keepersim.cli.c:1: from keepersim.sim.run_loop import _private"
    ]
    assert find_library_imports_of_cli(made_up) == [
        "keepersim.server.x:1: imports keepersim.cli.a",
        "keepersim.server.x:2: imports keepersim",
    ]
    del made_up["keepersim.cli.b"]
    assert find_cycle(get_import_graph(made_up, CLI)) == []


def test_importing_the_library_imports_no_extra() -> None:
    heavy = sorted({module for modules in EXTRAS.values() for module in modules})
    code = (
        "import sys, keepersim, keepersim.chain, keepersim.sim.run_loop\n"
        f"print(','.join(m for m in {heavy!r} if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert heavy and done.stdout.strip() == ""


def test_the_extras_are_pyprojects() -> None:
    """EXTRAS (what a command checks before it starts) names pyproject.toml's extras."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = project["optional-dependencies"]
    for extra, modules in EXTRAS.items():
        names = {
            requirement.split(">")[0].split("=")[0].split("<")[0].strip()
            for requirement in declared[extra]
        }
        assert names == set(modules.values()), extra
    core = {r.split(">")[0].split("=")[0].split("<")[0].strip() for r in project["dependencies"]}
    assert not core & {d for modules in EXTRAS.values() for d in modules.values()}


REPORT = "keepersim.report"
#: What ``keepersim.report`` may not import: it formats run records, it does not run them.
RUNNERS = (
    "keepersim.sim.run_loop",
    "keepersim.sim.stepper",
    "keepersim.runs.engines",
    "keepersim.chain",
)


def find_report_imports_of_runners(sources: Mapping[str, str]) -> list[str]:
    """Modules of keepersim.report that import a runner (``from p import m`` counts p.m)."""
    found: list[str] = []
    for module, source in sources.items():
        if not is_in(module, REPORT):
            continue
        for line, target, names in iter_imports(module, source):
            imported = [target, *(f"{target}.{name}" for name in names)]
            runners = [r for r in RUNNERS if any(is_in(m, r) for m in imported)]
            found.extend(f"{module}:{line}: imports {runner}" for runner in runners)
    return found


def test_report_only_formats(sources: dict[str, str]) -> None:
    assert find_report_imports_of_runners(sources) == []


def test_the_report_rule_finds_what_it_looks_for() -> None:
    made_up = {
        "keepersim.report.a": "def f():\n    from keepersim.runs.engines import execute_runs\n",
        "keepersim.report.b": "from keepersim.sim import run_loop\nimport keepersim.chain\n",
        "keepersim.report.c": "from keepersim.report.stats import mean_or_none\n",
        "keepersim.runs.d": "from keepersim.sim.run_loop import run_scenario\n",
    }
    assert find_report_imports_of_runners(made_up) == [
        "keepersim.report.a:2: imports keepersim.runs.engines",
        "keepersim.report.b:1: imports keepersim.sim.run_loop",
        "keepersim.report.b:2: imports keepersim.chain",
    ]
