"""Imports flow ``codec <- layers <- stats <- archiver``: no package imports one to its right; and a reading
command loads no more than it needs."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ORDER = ("codec", "layers", "stats", "archiver")


def _modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _imported(path: Path) -> set[str]:
    return {name.split(".")[0] for name in _modules(path)}


@pytest.mark.parametrize("package", ORDER[:-1])
def test_no_package_imports_one_above_it(package: str) -> None:
    above = set(ORDER[ORDER.index(package) + 1 :])
    wrong = {
        str(path.relative_to(ROOT)): sorted(_imported(path) & above) for path in sorted((ROOT / package).rglob("*.py"))
    }
    assert {path: names for path, names in wrong.items() if names} == {}
    assert len(wrong) > 3


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from stats.rollup import day_of\nimport archiver.cli\n", encoding="utf-8")
    assert _imported(module) == {"stats", "archiver"}


def test_only_the_entry_point_imports_the_cli() -> None:
    """The CLI wires the daemon, the router and the web app; none of them calls back up into it."""
    users = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "archiver").rglob("*.py"))
        if "cli" not in path.relative_to(ROOT / "archiver").parts
        and any(name == "archiver.cli" or name.startswith("archiver.cli.") for name in _modules(path))
    ]
    assert users == ["archiver/__main__.py"]


def test_a_reading_command_loads_neither_the_daemon_nor_the_logging() -> None:
    """``get``, ``find``, ``status``, ``stats``, ``archival``: `archiver` hands out its names on first use, and the
    router's metrics import structlog only to log a failed scrape, so these start without either."""
    code = (
        "import sys\n"
        "import archiver.cli.archival, archiver.cli.find, archiver.cli.get, archiver.cli.stats, archiver.cli.status\n"
        "print(sorted({'archiver.daemon.loop', 'fastapi', 'structlog'} & set(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def _import_graph(packages: tuple[str, ...]) -> dict[str, set[str]]:
    """Module -> the repository's modules it imports, at the top or inside a function."""
    modules: dict[str, Path] = {}
    for package in packages:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
        graph[name] = (found & modules.keys()) - {name}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(graph[module]):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return circles


def test_no_modules_import_each_other_in_a_circle() -> None:
    """Issue 51: not even through an import inside a function (a module then cannot be read alone)."""
    graph = _import_graph((*ORDER, "bench"))
    assert len(graph) > 100
    assert _circles(graph) == []


def test_the_circle_check_sees_a_circle() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
