"""The tree shows the architecture: no module reaches into another's private names, no two
packages import each other (through any chain), and docs/architecture.md's tree table names
every package and only paths that exist."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"


def _modules() -> dict[str, tuple[Path, bool]]:
    """Every module of the package: dotted name → (file, is a package)."""
    found = {}
    for path in (SRC / "tocsin").rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if package else parts)] = (path, package)
    return found


def _imports(modules: dict[str, tuple[Path, bool]]) -> list[tuple[str, str, str | None]]:
    """(importing module, imported module, name taken from it or None) for every import of a
    Tocsin module anywhere in a module (at the top, in a function, under TYPE_CHECKING), and
    ``module._name`` uses of a module imported whole."""
    found: list[tuple[str, str, str | None]] = []
    for name, (path, _) in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        whole: dict[str, str] = {}  # a local name bound to a Tocsin module
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tocsin"):
                assert node.level == 0, f"{name}: relative import"
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    if full in modules:
                        found.append((name, full, None))
                        whole[alias.asname or alias.name] = full
                    else:
                        found.append((name, str(node.module), alias.name))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("tocsin"):
                        found.append((name, alias.name, None))
                        if alias.asname:
                            whole[alias.asname] = alias.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in whole):
                found.append((name, whole[node.value.id], node.attr))
    return found


def _private(name: str | None) -> bool:
    return name is not None and name.startswith("_") and not name.startswith("__")


def test_no_module_imports_a_private_name_of_another() -> None:
    modules = _modules()
    reaching = sorted({f"{who} uses {target}.{name}" for who, target, name in _imports(modules)
                       if _private(name) and target != who})
    assert reaching == []


def _package_of(module: str, packages: set[str]) -> str:
    """The first-level package a module belongs to (``tocsin.api.ui.pages`` →
    ``tocsin.api``); a top-level module is its own."""
    parts = module.split(".")
    first = ".".join(parts[:2])
    return first if first in packages else module


def test_no_import_cycle_between_packages() -> None:
    modules = _modules()
    packages = {name for name, (_, package) in modules.items() if package and name != "tocsin"}
    graph: dict[str, set[str]] = defaultdict(set)
    why: dict[tuple[str, str], list[str]] = defaultdict(list)
    for who, target, _ in _imports(modules):
        if who == "tocsin" or target == "tocsin":
            continue
        a, b = _package_of(who, packages), _package_of(target, packages)
        if a != b:
            graph[a].add(b)
            why[(a, b)].append(f"{who} -> {target}")

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            here = todo.pop()
            if here == goal:
                return True
            if here not in seen:
                seen.add(here)
                todo.extend(graph[here])
        return False

    cycles = sorted(f"{a} <-> {b}: {why[(a, b)][0]}" for a in list(graph) for b in graph[a]
                    if reaches(b, a))
    assert cycles == []


def _tree_paths() -> list[str]:
    """Every path the first column of docs/architecture.md's tree table names, each relative
    to the folder of the path before it in its cell (``dispatcher/runs.py``, ``handover.py``)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("## The tree", 1)[1].split("\n## ", 1)[0]
    paths = []
    for row in re.findall(r"^\| (.+?) \|", table, re.MULTILINE):
        folder = ""
        for named in re.findall(r"`([^`]+)`", row):
            path = named if named.startswith("tocsin/") else folder + named
            folder = path if path.endswith("/") else path.rsplit("/", 1)[0] + "/"
            paths.append(path)
    return paths


def test_the_architecture_tree_names_every_package_and_only_real_paths() -> None:
    paths = _tree_paths()
    assert [p for p in paths if not (SRC / p).exists()] == []
    named = {p.rstrip("/") if p.endswith("/") else p.rsplit("/", 1)[0] for p in paths}
    packages = {str(init.parent.relative_to(SRC)) for init in (SRC / "tocsin").rglob("__init__.py")}
    assert sorted(packages - named - {"tocsin"}) == []
