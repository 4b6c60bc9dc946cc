"""The distributions ``src/stateway`` imports are the ones ``pyproject.toml`` declares.

A module imported only because a declared distribution happens to depend on it today
works from this checkout and breaks for a user once that distribution stops (or loosens
its range): each one the code imports is declared, unless a declared one pins it to its
own release (:data:`PINNED`) or the code runs without it (:data:`OPTIONAL`). Each declared
runtime dependency is imported, unless loaded by name (:data:`LOADED_BY_NAME`).
"""

from __future__ import annotations

import ast
import functools
import re
import sys
import tomllib
from importlib.metadata import packages_distributions, requires
from pathlib import Path

ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "src" / "stateway"

PINNED = {"pydantic-core": "pydantic", "mcp-types": "mcp"}
"""Imported, not declared: the distribution pinning it (``==``) to the release it was
built with, so the two are one dependency."""

OPTIONAL = {"uvloop"}
"""Imported, not declared: ``subcommands.py`` runs on asyncio's own loop without it
(``uvicorn[standard]`` installs it where it builds)."""

LOADED_BY_NAME = {"aiosqlite"}
"""Declared, not imported: SQLAlchemy loads it for a ``sqlite+aiosqlite`` URL."""


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(requirement: str) -> str:
    return _normalized(re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0])


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = project["dependencies"] + project["optional-dependencies"]["otel"]
    return {_requirement_name(requirement) for requirement in runtime}


@functools.cache
def _providers() -> dict[str, set[str]]:
    """Each installed import package -> the distributions providing it (several for a
    namespace package such as ``opentelemetry``)."""
    return {
        top: {_normalized(name) for name in names}
        for top, names in packages_distributions().items()
    }


@functools.cache
def _imported() -> dict[str, set[str]]:
    """Each third-party import package the package imports -> the modules importing it."""
    imported: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                tops = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops = [node.module.split(".")[0]]
            else:
                continue
            for top in tops:
                if top not in sys.stdlib_module_names and top != "stateway":
                    imported.setdefault(top, set()).add(path.relative_to(ROOT).as_posix())
    return imported


def test_every_distribution_the_package_imports_is_declared() -> None:
    providers = _providers()
    allowed = _declared() | OPTIONAL | set(PINNED)
    undeclared = {
        top: sorted(paths)[:3]
        for top, paths in _imported().items()
        if not providers.get(top, set()) & allowed
    }
    assert not undeclared, f"declare their distributions in [project] dependencies: {undeclared}"


def test_a_dependency_left_undeclared_is_pinned_by_the_one_declared_beside_it() -> None:
    for name, pinner in PINNED.items():
        pins = [
            requirement
            for requirement in requires(pinner) or []
            if _requirement_name(requirement) == name and "==" in requirement
        ]
        assert pins, f"{pinner} no longer pins {name}: declare {name}"


def test_every_declared_dependency_is_imported() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {_requirement_name(requirement) for requirement in project["dependencies"]}
    providers = _providers()
    imported = {name for top in _imported() for name in providers.get(top, set())}
    unused = declared - imported - LOADED_BY_NAME
    assert not unused, f"declared in [project] dependencies, imported nowhere: {sorted(unused)}"
