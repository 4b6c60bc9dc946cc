"""The names of declared Responses tools: any tool's at most 128 characters, as hosted
checks them; their characters not judged (see :mod:`stateway.protocols.tool_name`)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from stateway.core.errors import InvalidRequest
from stateway.protocols.responses.decode import decode_create

PATTERN_MESSAGE = (
    "Invalid '{param}': string does not match pattern. Expected a string that matches the "
    "pattern '^[a-zA-Z0-9_-]+$'."
)


def refusal(**fields: Any) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        decode_create(orjson.dumps({"model": "m", "input": "x", **fields}))
    return caught.value


def function(name: str) -> dict[str, Any]:
    return {"type": "function", "name": name, "parameters": {"type": "object"}}


def declared(**fields: Any) -> list[str]:
    command = decode_create(orjson.dumps({"model": "m", "input": "x", **fields}))
    return [tool["name"] for tool in command.settings.tools]


@pytest.mark.parametrize("name", ["a.b", "get weather", "a/b", "ünï", "a:b"])
def test_a_function_name_of_other_characters_is_taken(name: str) -> None:
    """Hosted refuses a name off ``^[a-zA-Z0-9_-]+$`` (a dotted MCP name), vLLM and
    llama.cpp take it, and an Anthropic upstream is sent a name it takes: taken, as the
    Chat fast path forwards it."""
    assert declared(tools=[function("ok"), function(name)]) == ["ok", name]


def test_a_namespace_members_name_of_other_characters_is_taken() -> None:
    namespace = {"type": "namespace", "name": "ns", "description": "d", "tools": [function("a.b")]}
    command = decode_create(orjson.dumps({"model": "m", "input": "x", "tools": [namespace]}))
    [declared_namespace] = command.settings.tools
    assert [tool["name"] for tool in declared_namespace["tools"]] == ["a.b"]


@pytest.mark.parametrize("kind", ["function", "custom"])
def test_a_tool_name_over_128_characters_is_refused_as_hosted(kind: str) -> None:
    error = refusal(tools=[{"type": kind, "name": "a" * 129}])
    assert (error.param, error.code) == ("tools[0].name", "string_above_max_length")
    assert error.message == (
        "Invalid 'tools[0].name': string too long. Expected a string with maximum length 128, "
        "but got a string with length 129 instead."
    )


@pytest.mark.parametrize("name", ["a" * 128, "get_weather", "A-1_b", "mcp__srv__tool"])
def test_names_hosted_takes_are_taken(name: str) -> None:
    command = decode_create(orjson.dumps({"model": "m", "input": "x", "tools": [function(name)]}))
    assert [tool["name"] for tool in command.settings.tools] == [name]


def test_a_custom_tool_name_of_other_characters_is_taken() -> None:
    tools = [{"type": "custom", "name": "apply.patch"}]
    command = decode_create(orjson.dumps({"model": "m", "input": "x", "tools": tools}))
    assert command.settings.tools == tools
