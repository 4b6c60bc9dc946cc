"""The configuration's reference stays true to its models: README's example files load as
they are (a renamed or removed key is refused there as in a user's file), and every
setting the models take is documented in README or docs/."""

from __future__ import annotations

import base64
import re
import tomllib
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from stateway.config import Config

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = README + "".join(
    path.read_text(encoding="utf-8")
    for path in sorted((ROOT / "docs").glob("*.md"))
    if path.name != "benchmarks.md"  # measurements of their day, not a reference
)
KEY = base64.b64encode(bytes(32)).decode()


def _examples() -> list[dict[str, Any]]:
    """README's TOML blocks that are gateway configuration (not a client's, not a
    fragment of a table declared elsewhere)."""
    blocks = re.findall(r"```toml\n(.*?)```", README, re.DOTALL)
    files = [tomllib.loads(block.replace('"…"', f'"{KEY}"')) for block in blocks]
    return [data for data in files if "server" in data or isinstance(data.get("routes"), list)]


@pytest.mark.parametrize("data", _examples(), ids=lambda data: "+".join(data))
def test_readmes_example_configuration_loads(data: dict[str, Any]) -> None:
    if "backends" not in data:  # a routes example names its candidates' backends
        named = {c["backend"] for route in data["routes"] for c in route["candidates"]}
        data["backends"] = [{"name": name, "url": "http://127.0.0.1:8000/v1"} for name in named]
    Config.model_validate(data)


def _settings(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every setting's dotted name, nested tables' included."""
    names = []
    for name, field in model.model_fields.items():
        names.append(prefix + name)
        for kind in _kinds(field.annotation):
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                names += _settings(kind, f"{prefix}{name}.")
    return names


def _kinds(annotation: object) -> list[object]:
    """``annotation`` and what it is made of (``X | None``, ``dict[str, X]``, ...)."""
    found, pending = [], [annotation]
    while pending:
        kind = pending.pop()
        found.append(kind)
        pending += typing.get_args(kind)
    return found


@pytest.mark.parametrize("setting", _settings(Config))
def test_every_setting_is_documented(setting: str) -> None:
    key = setting.rsplit(".", 1)[-1]
    assert re.search(rf"\b{key}\b", DOCS), f"{setting} is in no README or docs/ page"
