"""Decoding tool search: the ``tool_search`` tool, ``defer_loading``, and the
``tool_search_call`` / ``tool_search_output`` input items."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from stateway.core.commands import CreateResponse
from stateway.core.errors import InvalidRequest
from stateway.protocols.responses.decode import decode_create
from stateway.protocols.responses.items import decode_items

WEATHER: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object"},
    "defer_loading": True,
}


def decode(**body: Any) -> CreateResponse:
    return decode_create(orjson.dumps({"model": "m", "input": "x", **body}))


def test_a_tool_search_tool_and_deferred_tools_are_kept() -> None:
    search = {
        "type": "tool_search",
        "execution": "client",
        "description": "Find tools",
        "parameters": {"type": "object", "properties": {"goal": {"type": "string"}}},
    }
    namespace = {
        "type": "namespace",
        "name": "crm",
        "description": "CRM",
        "defer_loading": True,
        "tools": [{"type": "custom", "name": "note", "defer_loading": False}],
    }
    command = decode(tools=[WEATHER, namespace, search])
    weather, crm, declared = command.settings.tools
    assert weather["defer_loading"] is True
    assert crm["defer_loading"] is True
    assert crm["tools"][0]["defer_loading"] is False
    assert declared == search
    assert decode(tools=[{"type": "tool_search"}]).settings.tools == [{"type": "tool_search"}]


def test_a_function_named_tool_search_is_declared_beside_the_tool_search() -> None:
    """Hosted's tool search is no function: a function of its name is the client's own (the
    gateway offers its search apart: :func:`~stateway.core.tools.model_names.apart_name`)."""
    mine = {"type": "function", "name": "tool_search", "parameters": {"type": "object"}}
    search, function = decode(tools=[{"type": "tool_search"}, mine]).settings.tools
    assert (search, function["type"], function["name"]) == (
        {"type": "tool_search"},
        "function",
        "tool_search",
    )


@pytest.mark.parametrize(
    ("tools", "param", "code"),
    [
        ([{"type": "tool_search", "execution": "remote"}], "tools[0].execution", "invalid_value"),
        ([{"type": "tool_search", "parameters": "x"}], "tools[0].parameters", "invalid_type"),
        ([{"type": "tool_search", "description": 1}], "tools[0].description", "invalid_type"),
        (
            [{"type": "tool_search"}, {"type": "tool_search", "execution": 1}],
            "tools[1].execution",
            "invalid_type",  # a value of another type, as hosted names it
        ),
        ([{**WEATHER, "defer_loading": "yes"}], "tools[0].defer_loading", "invalid_type"),
        (
            [{"type": "namespace", "name": "n", "defer_loading": 1, "tools": [WEATHER]}],
            "tools[0].defer_loading",
            "invalid_type",
        ),
    ],
)
def test_bad_tool_search_tools_are_named(tools: object, param: str, code: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode(tools=tools)
    assert (caught.value.param, caught.value.code) == (param, code)


def test_search_items_get_ids_and_are_otherwise_kept_as_sent() -> None:
    call = {"type": "tool_search_call", "call_id": "c", "execution": "client", "arguments": {}}
    output = {
        "type": "tool_search_output",
        "call_id": "c",
        "execution": "client",
        "tools": [WEATHER, {"type": "namespace", "name": "n", "tools": [WEATHER]}],
    }
    hosted = {"type": "tool_search_output", "call_id": None, "execution": "server", "tools": []}
    decoded = decode(input=[call, output, hosted]).input
    assert [item["id"][:4] for item in decoded] == ["tsc_", "tso_", "tso_"]
    assert [item["status"] for item in decoded] == ["completed"] * 3
    for sent, kept in zip([call, output, hosted], decoded, strict=True):
        assert {k: v for k, v in kept.items() if k not in ("id", "status")} == sent


@pytest.mark.parametrize(
    ("item", "param", "code"),
    [
        (
            {"type": "tool_search_output", "call_id": "c"},
            "input[0].tools",
            "missing_required_parameter",
        ),
        (
            {"type": "tool_search_output", "call_id": "c", "tools": {}},
            "input[0].tools",
            "invalid_type",
        ),
        (
            {"type": "tool_search_output", "call_id": "c", "tools": [1]},
            "input[0].tools[0]",
            "invalid_type",
        ),
        (
            {"type": "tool_search_output", "call_id": "c", "tools": [{"type": "function"}]},
            "input[0].tools[0].name",
            "missing_required_parameter",
        ),
        (
            {
                "type": "tool_search_output",
                "call_id": "c",
                "tools": [{"type": "namespace", "name": "n", "tools": [{"type": "x"}]}],
            },
            "input[0].tools[0].tools[0].type",
            "unsupported_tool_type",
        ),
        (
            {"type": "tool_search_output", "tools": []},
            "input[0].call_id",
            "missing_required_parameter",
        ),
        (
            {"type": "tool_search_output", "call_id": "", "tools": []},
            "input[0].call_id",
            "invalid_value",
        ),
        (
            {"type": "tool_search_output", "call_id": 7, "execution": "server", "tools": []},
            "input[0].call_id",
            "invalid_type",
        ),
        (
            {"type": "tool_search_output", "call_id": "c", "execution": "x", "tools": []},
            "input[0].execution",
            "invalid_value",
        ),
        (
            {"type": "tool_search_call", "call_id": "c"},
            "input[0].arguments",
            "missing_required_parameter",
        ),
        (
            {"type": "tool_search_call", "arguments": {}},
            "input[0].call_id",
            "missing_required_parameter",
        ),
    ],
)
def test_bad_search_items_are_named(item: dict[str, Any], param: str, code: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode(input=[item])
    assert (caught.value.param, caught.value.code) == (param, code)


def test_an_mcp_servers_defer_loading_is_kept_and_must_be_a_boolean() -> None:
    server = {"type": "mcp", "server_label": "docs", "defer_loading": True}
    assert decode(tools=[server]).settings.tools == [server]
    assert decode(tools=[{**server, "defer_loading": None}]).settings.tools == [
        {"type": "mcp", "server_label": "docs"}
    ]
    with pytest.raises(InvalidRequest) as refused:
        decode(tools=[{**server, "defer_loading": "yes"}])
    assert (refused.value.param, refused.value.code) == ("tools[0].defer_loading", "invalid_type")


def test_a_search_output_may_load_an_mcp_servers_tools() -> None:
    loaded = {
        "type": "tool_search_output",
        "call_id": "c",
        "execution": "client",
        "tools": [{"type": "mcp", "server_label": "docs", "allowed_tools": ["add"]}],
    }
    call = {"type": "tool_search_call", "call_id": "c", "execution": "client", "arguments": {}}
    command = decode(input=[call, loaded], tools=[{"type": "tool_search"}])
    assert command.input[-1]["tools"] == loaded["tools"]
    bad = {**loaded, "tools": [{"type": "mcp", "server_label": "docs", "allowed_tools": 3}]}
    with pytest.raises(InvalidRequest) as refused:
        decode(input=[call, bad], tools=[{"type": "tool_search"}])
    assert refused.value.param == "input[1].tools[0].allowed_tools"


def test_credentials_in_an_items_mcp_tool_are_used_never_kept() -> None:
    """A client search may answer with a server's declaration as it declared it, and an
    ``additional_tools`` item may declare a server: their ``headers`` and ``authorization``
    are left out of the items (stored, listed, sent back), as out of the echoed ``tools``;
    the server the item declares is reached with them."""
    secret = {"authorization": "sk-secret", "headers": {"X-Key": "k"}}
    server = {"type": "mcp", "server_label": "docs", "server_url": "https://docs.test/mcp"}
    call = {"type": "tool_search_call", "call_id": "c", "execution": "client", "arguments": {}}
    loaded = {"type": "tool_search_output", "call_id": "c", "execution": "client"}
    added = {"type": "additional_tools", "role": "developer"}
    other = {**server, "server_label": "more"}
    command = decode(
        input=[
            call,
            {**loaded, "tools": [{**server, **secret}]},
            {**added, "tools": [{**other, **secret}]},
        ],
        tools=[{"type": "tool_search"}],
    )
    assert command.input[1]["tools"] == [server]
    assert command.input[2]["tools"] == [other]
    assert command.settings.tools[-1] == {**other, **secret}  # used for the run
    own = {"type": "function", "name": "f", "headers": {"X-Key": "k"}}  # no server's
    [kept] = decode_items([{**added, "tools": [own, "junk"]}])  # as a conversation's
    assert kept["tools"] == [own, "junk"]
