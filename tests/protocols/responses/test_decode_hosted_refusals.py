"""What a Responses create refuses as hosted OpenAI refuses it, in hosted's words (its
``param``, ``code`` and message): fields read as they came, whatever the upstream."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from stateway.core.errors import InvalidRequest
from stateway.protocols.responses.decode import decode_compact, decode_create


def refused(decode: Any = decode_create, **fields: Any) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        decode(orjson.dumps({"model": "m", "input": "x", **fields}))
    return caught.value


@pytest.mark.parametrize("decode", [decode_create, decode_compact])
def test_a_prompt_cache_key_over_64_characters_is_refused_as_hosted(decode: Any) -> None:
    """Hosted: ``Invalid 'prompt_cache_key': string too long. Expected a string with maximum
    length 64, ...`` (``string_above_max_length``): an agent's session ids joined, say."""
    error = refused(decode, prompt_cache_key="k" * 65)
    assert (error.status, error.param, error.code) == (
        400,
        "prompt_cache_key",
        "string_above_max_length",
    )
    assert error.message == (
        "Invalid 'prompt_cache_key': string too long. Expected a string with maximum length "
        "64, but got a string with length 65 instead."
    )


def test_a_prompt_cache_key_of_64_characters_is_kept() -> None:
    body = {"model": "m", "input": "x", "prompt_cache_key": "k" * 64}
    assert decode_create(orjson.dumps(body)).settings.prompt_cache_key == "k" * 64
    assert decode_compact(orjson.dumps(body)).settings.prompt_cache_key == "k" * 64


def test_a_programmatic_tool_calling_choice_names_its_tool_by_type() -> None:
    """A ``tool_choice`` the SDK types (``ToolChoiceSpecificProgrammaticToolCallingParam``):
    judged as any hosted type's, against the tools declared."""
    tools = [{"type": "programmatic_tool_calling"}]
    choice = {"type": "programmatic_tool_calling"}
    body = {"model": "m", "input": "x", "tools": tools, "tool_choice": choice}
    assert decode_create(orjson.dumps(body)).settings.tool_choice == choice
    error = refused(tool_choice=choice)
    assert (error.param, error.code) == ("tool_choice", "invalid_value")
    assert (
        error.message == "Tool choice 'programmatic_tool_calling' not found in 'tools' parameter."
    )


def test_a_tool_choice_object_without_a_type_is_a_missing_type() -> None:
    error = refused(tools=[{"type": "function", "name": "f"}], tool_choice={"name": "f"})
    assert (error.param, error.code, error.message) == (
        "tool_choice.type",
        "missing_required_parameter",
        "Missing required parameter: 'tool_choice.type'.",
    )


def test_a_text_format_type_the_api_has_not_is_refused_listing_its_types() -> None:
    """In hosted's words, as a translated Chat request's ``response_format.type``."""
    error = refused(text={"format": {"type": "object"}})
    assert (error.param, error.code, error.message) == (
        "text.format.type",
        "invalid_value",
        "Invalid value: 'object'. Supported values are: 'json_object', 'json_schema', and 'text'.",
    )
    error = refused(text={"format": {"type": ["json_object"]}})
    assert (error.param, error.code, error.message) == (
        "text.format.type",
        "invalid_type",
        "Invalid type for 'text.format.type': expected one of 'json_object', 'json_schema', "
        "or 'text', but got an array instead.",
    )


@pytest.mark.parametrize("role", ["tool", "function", "Assistant"])
def test_a_message_role_the_api_has_not_is_refused_in_hosted_words(role: str) -> None:
    """Hosted: ``Invalid value: 'tool'. Supported values are: 'assistant', 'system',
    'developer', and 'user'.`` (a Chat ``tool`` message sent as a Responses item)."""
    error = refused(input=[{"role": "user", "content": "x"}, {"role": role, "content": "y"}])
    assert (error.param, error.code, error.message) == (
        "input[1].role",
        "invalid_value",
        f"Invalid value: '{role}'. Supported values are: 'assistant', 'system', 'developer', "
        "and 'user'.",
    )


def test_a_message_without_a_role_misses_it() -> None:
    error = refused(input=[{"type": "message", "content": "x"}])
    assert (error.param, error.code, error.message) == (
        "input[0].role",
        "missing_required_parameter",
        "Missing required parameter: 'input[0].role'.",
    )


@pytest.mark.parametrize(
    ("tool", "param", "value", "values"),
    [
        (
            {
                "type": "custom",
                "name": "c",
                "format": {"type": "grammar", "syntax": "peg", "definition": "x"},
            },
            "tools[0].format.syntax",
            "peg",
            "'lark' and 'regex'",
        ),
        (
            {"type": "custom", "name": "c", "format": {"type": "json"}},
            "tools[0].format.type",
            "json",
            "'text' and 'grammar'",
        ),
        (
            {"type": "web_search", "search_context_size": "huge"},
            "tools[0].search_context_size",
            "huge",
            "'low', 'medium', and 'high'",
        ),
        (
            {"type": "tool_search", "execution": "remote"},
            "tools[0].execution",
            "remote",
            "'client' and 'server'",
        ),
    ],
)
def test_a_tool_field_value_the_api_has_not_is_refused_in_hosted_words(
    tool: dict[str, Any], param: str, value: str, values: str
) -> None:
    """A custom tool's grammar ``syntax`` is one of Chat's (``lark``, ``regex``), as the
    SDK types it; every such value is refused as hosted refuses a value it does not take."""
    error = refused(tools=[tool])
    assert (error.param, error.code, error.message) == (
        param,
        "invalid_value",
        f"Invalid value: '{value}'. Supported values are: {values}.",
    )


def test_a_grammar_of_either_syntax_is_kept() -> None:
    for syntax in ("lark", "regex"):
        grammar = {"type": "grammar", "syntax": syntax, "definition": "x"}
        tools = [{"type": "custom", "name": "c", "format": grammar}]
        command = decode_create(orjson.dumps({"model": "m", "input": "x", "tools": tools}))
        assert command.settings.tools == tools


@pytest.mark.parametrize(
    ("mode", "code", "message"),
    [
        ("sometimes", "invalid_value", "Invalid value: 'sometimes'. Supported values are: "),
        (None, "missing_required_parameter", "Missing required parameter: 'tool_choice.mode'."),
    ],
)
def test_an_allowed_tools_mode_is_judged_in_hosted_words(
    mode: str | None, code: str, message: str
) -> None:
    choice = {"type": "allowed_tools", "mode": mode, "tools": [{"type": "function", "name": "f"}]}
    error = refused(tools=[{"type": "function", "name": "f"}], tool_choice=choice)
    assert (error.param, error.code) == ("tool_choice.mode", code)
    assert error.message.startswith(message)
    if mode is not None:
        assert error.message.endswith("'auto' and 'required'.")


@pytest.mark.parametrize(
    ("field", "value", "kind"),
    [
        ("tool_choice", 5, "an integer"),
        ("tool_choice", ["auto"], "an array"),
        ("conversation", 5, "an integer"),
        ("conversation", True, "a boolean"),
    ],
)
def test_a_string_or_object_field_of_another_type_is_worded_as_hosted(
    field: str, value: object, kind: str
) -> None:
    """Not pydantic's words about one of the union's alternatives."""
    error = refused(**{field: value})
    assert (error.param, error.code, error.message) == (
        field,
        "invalid_type",
        f"Invalid type for '{field}': expected one of a string or object, but got {kind} instead.",
    )


def test_max_tool_calls_below_one_is_refused_as_hosted() -> None:
    """Hosted: ``Invalid 'max_tool_calls': integer below minimum value. Expected a value >=
    1, but got 0 instead.``"""
    error = refused(max_tool_calls=0)
    assert (error.param, error.code, error.message) == (
        "max_tool_calls",
        "integer_below_min_value",
        "Invalid 'max_tool_calls': integer below minimum value. Expected a value >= 1, but got "
        "0 instead.",
    )
    body = {"model": "m", "input": "x", "max_tool_calls": 1}
    assert decode_create(orjson.dumps(body)).settings.max_tool_calls == 1
