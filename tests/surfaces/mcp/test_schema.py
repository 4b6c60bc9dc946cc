"""The MCP tools' inputs: every tool that changes something takes a command id (their
checked-in schema is compared by ``tests/test_schemas.py``)."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft202012Validator
from pydantic import ValidationError

from stateway.surfaces.mcp.tools import TOOLS


def test_every_tool_that_changes_something_takes_a_command_id() -> None:
    changing = {
        "create_response",
        "cancel_response",
        "delete_response",
        "create_conversation",
        "update_conversation",
        "delete_conversation",
        "add_conversation_items",
        "delete_conversation_item",
    }
    takes_id = {n for n, t in TOOLS.items() if "command_id" in t.input.model_fields}
    assert takes_id == changing


SAMPLES: dict[str, Any] = {"string": "x", "array": [{"type": "message"}], "object": {"a": "b"}}
CANDIDATES: list[Any] = [
    *(None, True, False, 0, 1, 5, 5.0, 5.5, 1e2, 101, 101.0, -1),
    *("", "x", "5", "asc", "desc", [], [{}], ["x"], {}, {"a": "b"}, {"a": 1}),
]


def _sample(schema: dict[str, Any]) -> Any:
    kind = schema.get("type") or schema["anyOf"][0]["type"]
    return SAMPLES[kind]


@pytest.mark.parametrize("name", list(TOOLS))
def test_a_tool_takes_exactly_the_arguments_its_input_schema_allows(name: str) -> None:
    """What a host checks against ``inputSchema`` (JSON Schema 2020-12, MCP's default
    dialect) is what the tool takes: no stricter (``5.0`` is an integer there), no laxer."""
    model = TOOLS[name].input
    schema = model.model_json_schema()
    Draft202012Validator.check_schema(schema)
    validator = Draft202012Validator(schema)
    properties = schema["properties"]
    base = {field: _sample(properties[field]) for field in schema.get("required", [])}
    for field in properties:
        for value in CANDIDATES:
            arguments = {**base, field: value}
            try:
                model.model_validate(arguments)
            except ValidationError:
                taken = False
            else:
                taken = True
            assert taken == validator.is_valid(arguments), (field, value)
