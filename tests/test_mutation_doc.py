"""docs/mutation.md's "What it runs" names everything ``[tool.mutmut]`` mutates and every
test path it runs, so a module added to the configuration cannot go unmentioned there.
The section shortens paths (``prepared.py`` after ``storage/sql/writer.py``), so each
entry is looked for by its last part: the file's name, or a folder's ``name/*``."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_MUTMUT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mutmut"]


def _section() -> str:
    text = (ROOT / "docs" / "mutation.md").read_text(encoding="utf-8")
    found = re.search(r"^## What it runs\n(.*?)^## ", text, re.MULTILINE | re.DOTALL)
    assert found is not None, "docs/mutation.md has no 'What it runs' section"
    return found[1]


def _named(path: str) -> str:
    """How the section names ``path``: ``loop.py``, ``search/*``, ``tests/mcp_client``."""
    parts = path.split("/")
    if parts[-1] == "*":
        return f"{parts[-2]}/*"
    if parts[-1].endswith(".py"):
        return parts[-1]
    return path


@pytest.mark.parametrize("path", _MUTMUT["only_mutate"])
def test_every_mutated_path_is_named(path: str) -> None:
    assert _named(path) in _section()


@pytest.mark.parametrize("path", _MUTMUT["pytest_add_cli_args_test_selection"])
def test_every_test_path_is_named(path: str) -> None:
    assert _named(path) in _section()


def test_the_pytest_arguments_are_named() -> None:
    for argument in _MUTMUT["pytest_add_cli_args"]:
        if argument != "-q":
            assert f"`{argument}`" in _section()
