"""A ``tools/call``'s error names the argument at fault."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from stateway.surfaces.mcp.tool_results import param_of


def test_an_invalid_argument_is_named_when_it_is_the_only_one() -> None:
    class Args(BaseModel):
        model: str
        items: list[int] = []
        meta: dict[str, int] = {}

    def param(arguments: dict[str, Any]) -> str | None:
        with pytest.raises(ValidationError) as caught:
            Args.model_validate(arguments)
        return param_of(caught.value)

    assert param({"items": []}) == "model"
    assert param({"model": "m", "items": [1, "x"]}) == "items[1]"
    assert param({"model": "m", "meta": {"team": "x"}}) == "meta.team"
    assert param({"items": ["x"]}) is None  # two arguments at fault
