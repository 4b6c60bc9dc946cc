"""A Messages body pydantic refuses, worded as Anthropic words it: the path as the client
wrote it and pydantic's words, never the gateway's own names for the body's parts (its
wire models' class names, pydantic's names for a union's alternatives)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import orjson
import pydantic
import pytest

from stateway.core.errors import InvalidRequest
from stateway.protocols.messages import blocks, edit_params, request, tool_params
from stateway.protocols.messages import wire as wire_base
from stateway.protocols.messages.decode import decode_count_tokens, decode_messages

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}}
TEXT = {"type": "text", "text": "hi"}
PNG = {"type": "base64", "media_type": "image/png", "data": "aGk="}
RICH: dict[str, Any] = {
    "model": "m",
    "max_tokens": 4000,
    "system": [{"type": "text", "text": "rules", "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {
            "role": "user",
            "content": [
                {**TEXT, "cache_control": {"type": "ephemeral"}},
                {"type": "image", "source": PNG},
                {"type": "image", "source": {"type": "url", "url": "https://x/a.png"}},
                {"type": "document", "source": {"type": "text", "data": "doc"}, "title": "t"},
                {"type": "document", "source": {"type": "content", "content": [TEXT]}},
                {"type": "document", "source": {**PNG, "media_type": "application/pdf"}},
                {"type": "search_result", "source": "s", "title": "t", "content": [TEXT]},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "plan", "signature": "sig=="},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {}},
                {
                    "type": "web_search_tool_result",
                    "tool_use_id": "srv_1",
                    "content": [{"type": "web_search_result", "url": "https://x", "title": "x"}],
                },
                {
                    "type": "mcp_tool_use",
                    "id": "mcp_1",
                    "name": "add",
                    "server_name": "calc",
                    "input": {},
                },
                {"type": "mcp_tool_result", "tool_use_id": "mcp_1", "content": [TEXT]},
                {"type": "tool_use", "id": "toolu_1", "name": "look", "input": {"q": "a"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [TEXT, {"type": "tool_reference", "tool_name": "look"}],
                },
            ],
        },
        {
            "role": "system",
            "output_config": {"effort": "low"},
            "content": [
                {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "look"}},
                {
                    "type": "tool_addition",
                    "tool": {
                        "type": "tool_definition",
                        "definition": {"name": "find", "input_schema": SCHEMA},
                    },
                },
                {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "find"}},
            ],
        },
        {"role": "user", "content": "go on"},
    ],
    "tools": [
        {"name": "look", "input_schema": SCHEMA, "defer_loading": True},
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 2},
        {"type": "bash_20250124", "name": "bash"},
        {"type": "mcp_toolset", "mcp_server_name": "calc", "configs": {"add": {"enabled": True}}},
    ],
    "mcp_servers": [
        {
            "type": "url",
            "url": "https://calc",
            "name": "calc",
            "tool_configuration": {"enabled": True, "allowed_tools": ["add"]},
        }
    ],
    "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
    "thinking": {"type": "enabled", "budget_tokens": 2048},
    "output_config": {"effort": "high"},
    "metadata": {"user_id": "u"},
    "service_tier": "auto",
    "stop_sequences": ["STOP"],
    "context_management": {
        "edits": [
            {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 2}},
            {
                "type": "clear_tool_uses_20250919",
                "trigger": {"type": "tool_uses", "value": 5},
                "keep": {"type": "tool_uses", "value": 1},
                "clear_at_least": {"type": "input_tokens", "value": 100},
                "exclude_tools": ["bash"],
                "clear_tool_inputs": ["look"],
            },
            {"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 900}},
        ]
    },
}
"""A body that holds every part of the Messages wire the gateway validates."""
WRONG: tuple[Any, ...] = (5, "x", [5], {})
"""A value of each JSON type but null (a number, a string, an array, an object)."""
INTERNAL = {
    name
    for wire in (request, blocks, tool_params, edit_params, wire_base)
    for name, value in vars(wire).items()
    if isinstance(value, type) and issubclass(value, pydantic.BaseModel)
}
"""The wire models' class names, which no client wrote."""
CAMEL_CASE = re.compile(r"\b[A-Z][a-z0-9]+[A-Z]\w*")


def replaced(value: Any, path: tuple[int | str, ...], by: Any) -> Any:
    if not path:
        return by
    head, rest = path[0], path[1:]
    if isinstance(value, list):
        return [replaced(v, rest, by) if i == head else v for i, v in enumerate(value)]
    return {k: replaced(v, rest, by) if k == head else v for k, v in value.items()}


def paths(value: Any, at: tuple[int | str, ...] = ()) -> Iterator[tuple[int | str, ...]]:
    """Every part of ``value`` (but the whole), by its path."""
    if at:
        yield at
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from paths(inner, (*at, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from paths(inner, (*at, index))


def malformed() -> Iterator[tuple[str, bytes]]:
    """:data:`RICH` with one part replaced by a value of each wrong type in turn."""
    for path in paths(RICH):
        for wrong in WRONG:
            label = f"{'.'.join(map(str, path))}={orjson.dumps(wrong).decode()}"
            yield label, orjson.dumps(replaced(RICH, path, wrong))


def test_the_rich_body_is_taken() -> None:
    decode_messages(orjson.dumps(RICH))
    decode_count_tokens(orjson.dumps({k: v for k, v in RICH.items() if k != "max_tokens"}))


@pytest.mark.parametrize(("label", "raw"), list(malformed()))
def test_a_refusal_names_no_internal_model(label: str, raw: bytes) -> None:
    """Whatever part of a body is of the wrong type, a refusal names it by its path and
    pydantic's words: no wire model's class name, in the message or the path."""
    try:
        decode_messages(raw)
    except InvalidRequest as error:
        said = f"{error.param} {error.message}"
        assert not INTERNAL & set(re.findall(r"\w+", said)), said
        assert not CAMEL_CASE.search(said), said
        assert "instance of" not in said, said


@pytest.mark.parametrize(
    ("edits", "param", "message"),
    [
        ([5], "context_management.edits.0", "Input should be a valid dictionary"),
        (["x"], "context_management.edits.0", "Input should be a valid dictionary"),
        ([None], "context_management.edits.0", "Input should be a valid dictionary"),
        (
            [{"type": "clear_tool_uses_20250919", "keep": 3}],
            "context_management.edits.0.keep",
            "Input should be a valid dictionary",
        ),
    ],
)
def test_a_non_object_where_an_object_belongs_is_named_by_its_path(
    edits: list[Any], param: str, message: str
) -> None:
    """``context_management.edits.0: Input should be a valid dictionary``: not the
    gateway's tag for an edit it does not serve (``edits.0.other``), nor the model it
    validates one as."""
    raw = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    body = {**orjson.loads(raw), "context_management": {"edits": edits}}
    with pytest.raises(InvalidRequest) as caught:
        decode_count_tokens(orjson.dumps(body))
    assert (caught.value.param, caught.value.message) == (param, f"{param}: {message}")


def test_an_edit_typed_by_no_string_is_refused_naming_its_type() -> None:
    for kind in ([5], {"a": 1}):
        edits = [{"type": kind}]
        raw = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        body = {**raw, "context_management": {"edits": edits}}
        with pytest.raises(InvalidRequest) as caught:
            decode_count_tokens(orjson.dumps(body))
        assert caught.value.message == (
            "context_management.edits.0.type: Input should be a valid string"
        )


def test_an_object_of_a_union_of_a_list_and_an_object_is_judged_as_the_object() -> None:
    """A web search result's ``content``, a list of results or an error object: an object
    missing a field is refused naming that field, not for not being a list."""
    failed = {"type": "web_search_tool_result_error"}
    block = {"type": "web_search_tool_result", "tool_use_id": "srv_1", "content": failed}
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": [block]}]
    raw = orjson.dumps({"model": "m", "max_tokens": 5, "messages": messages})
    with pytest.raises(InvalidRequest) as caught:
        decode_messages(raw)
    assert caught.value.message == "messages.1.content.0.content.error_code: Field required"
