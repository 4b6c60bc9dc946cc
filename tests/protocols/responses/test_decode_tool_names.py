"""The names of declared Responses tools, checked as hosted checks them: a function's of
``[a-zA-Z0-9_-]``, any tool's at most 128 characters, wherever the tool is declared."""

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


@pytest.mark.parametrize("name", ["a.b", "get weather", "a/b", "ünï", "a:b", "f\n"])
def test_a_function_name_off_the_pattern_is_refused_in_hosted_words(name: str) -> None:
    """Hosted: ``Invalid 'tools[0].name': string does not match pattern`` (a dotted MCP
    name, the usual mistake)."""
    error = refusal(tools=[function("ok"), function(name)])
    assert (error.status, error.param, error.code) == (400, "tools[1].name", "invalid_value")
    assert error.message == PATTERN_MESSAGE.format(param="tools[1].name")


@pytest.mark.parametrize(
    ("tools", "param"),
    [
        (  # a namespace member is a function of its own
            [{"type": "namespace", "name": "ns", "description": "d", "tools": [function("a.b")]}],
            "tools[0].tools[0].name",
        ),
    ],
)
def test_a_nested_function_name_off_the_pattern_is_named_by_its_path(
    tools: list[dict[str, Any]], param: str
) -> None:
    error = refusal(tools=tools)
    assert (error.param, error.code) == (param, "invalid_value")
    assert error.message == PATTERN_MESSAGE.format(param=param)


def test_a_loaded_or_added_function_name_off_the_pattern_is_named_by_its_path() -> None:
    added = {"type": "additional_tools", "role": "developer", "tools": [function("a.b")]}
    error = refusal(input=[added])
    assert (error.param, error.code) == ("input[0].tools[0].name", "invalid_value")


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


def test_a_custom_tool_name_is_not_held_to_the_function_pattern() -> None:
    """Hosted's pattern for a custom tool's name is not known: taken, as on Chat."""
    tools = [{"type": "custom", "name": "apply.patch"}]
    command = decode_create(orjson.dumps({"model": "m", "input": "x", "tools": tools}))
    assert command.settings.tools == tools
