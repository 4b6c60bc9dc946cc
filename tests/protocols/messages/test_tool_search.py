"""A gateway tool search as Anthropic's blocks, and back."""

from __future__ import annotations

from typing import Any

import pytest

from stateway.protocols.messages import tool_search
from stateway.protocols.messages.decode import decode_messages
from tests.protocols.messages.test_decode import body, refused

REGEX = {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"}
WEATHER: dict[str, Any] = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "input_schema": {"type": "object"},
    "defer_loading": True,
}
USE = {
    "type": "server_tool_use",
    "id": "srvtoolu_1",
    "name": "tool_search_tool_regex",
    "input": {"query": "weather"},
}
FOUND = {
    "type": "tool_search_tool_search_result",
    "tool_references": [{"type": "tool_reference", "tool_name": "get_weather"}],
}


@pytest.mark.parametrize(
    ("error", "shown"),
    [
        ("invalid_tool_input: The pattern is bad.", ("invalid_tool_input", "The pattern is bad.")),
        ("execution_time_exceeded: Too slow.", ("execution_time_exceeded", "Too slow.")),
        ("unavailable", ("unavailable", None)),
        (
            "A tool search needs a non-empty 'query'.",
            ("invalid_tool_input", "A tool search needs a non-empty 'query'."),
        ),
        (None, ("invalid_tool_input", None)),
    ],
)
def test_a_failed_search_shows_its_code_and_message(
    error: str | None, shown: tuple[str, str | None]
) -> None:
    item = {"id": "tso_1", "type": "tool_search_output", "status": "incomplete", "error": error}
    block = tool_search.block(item, "tool_search_tool_regex")
    assert block["tool_use_id"] == "srvtoolu_1"
    content = block["content"]
    assert content["type"] == "tool_search_tool_result_error"
    assert (content["error_code"], content["error_message"]) == shown


def history(*blocks: dict[str, Any]) -> bytes:
    """A body whose assistant turn is ``blocks``, sent back, the search and the weather tool
    declared."""
    return body(
        tools=[REGEX, WEATHER],
        messages=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": list(blocks)},
            {"role": "user", "content": "go"},
        ],
    )


def result(content: dict[str, Any], tool_use_id: str = "srvtoolu_1") -> dict[str, Any]:
    return {"type": "tool_search_tool_result", "tool_use_id": tool_use_id, "content": content}


def test_a_search_sent_back_loads_the_declared_tools_it_found() -> None:
    _, call, output, _ = decode_messages(history(USE, result(FOUND))).input
    assert call["id"] == "tsc_1"
    assert output == {
        "id": "tso_1",
        "type": "tool_search_output",
        "status": "completed",
        "call_id": None,
        "execution": "server",
        "tools": [
            {
                "type": "function",
                "name": "get_weather",
                "parameters": {"type": "object"},
                "description": "Current weather for a city.",
                "strict": False,
                "defer_loading": True,
            }
        ],
    }


@pytest.mark.parametrize(
    ("message", "error"),
    [("The pattern is bad.", "invalid_tool_input: The pattern is bad."), (None, "unavailable")],
)
def test_a_failed_search_sent_back_keeps_its_code_and_message(
    message: str | None, error: str
) -> None:
    failed = {"type": "tool_search_tool_result_error", "error_code": error.partition(":")[0]}
    if message is not None:
        failed["error_message"] = message
    _, _, output, _ = decode_messages(history(USE, result(failed))).input
    assert output == {
        "id": "tso_1",
        "type": "tool_search_output",
        "status": "incomplete",
        "call_id": None,
        "execution": "server",
        "tools": [],
        "error": error,
    }


def test_a_reference_is_named_by_its_place_in_the_result() -> None:
    unknown = {
        **FOUND,
        "tool_references": [
            *FOUND["tool_references"],
            {**FOUND["tool_references"][0], "tool_name": "get_time"},
        ],
    }
    error = refused(history(USE, result(unknown)))
    assert error.param == "messages.1.content.1.content.tool_references.1.tool_name"


@pytest.mark.parametrize(
    "blocks",
    [
        [result(FOUND)],  # no call before it
        [USE, result(FOUND, "srvtoolu_2")],  # another call's id
        [USE, result(FOUND), result(FOUND)],  # its call answered already
        [{**USE, "name": "web_search", "input": {"query": "x"}}, result(FOUND)],  # no search
    ],
    ids=["alone", "another", "twice", "web_search"],
)
def test_a_result_answering_no_search_before_it_is_refused(blocks: list[dict[str, Any]]) -> None:
    error = refused(history(*blocks))
    at = f"messages.1.content.{len(blocks) - 1}.tool_use_id"
    tool_use_id = blocks[-1]["tool_use_id"]
    assert (error.param, error.code) == (at, "tool_call_not_found")
    assert error.message == (
        f"{at}: unexpected tool_use_id '{tool_use_id}' found in a tool_search_tool_result "
        "block: it must follow the server_tool_use block of the search it answers."
    )


SERVERS = [
    {"type": "url", "url": "https://mcp.test/mcp", "name": "calc"},
    {"type": "url", "url": "https://mcp.test/mcp", "name": "docs"},
]


def deferred_toolset(server: str, **config: Any) -> dict[str, Any]:
    """The ``mcp_toolset`` of ``server`` deferring its tools (``config``: more of it)."""
    return {
        "type": "mcp_toolset",
        "mcp_server_name": server,
        "default_config": {"defer_loading": True, **config},
    }


def test_a_toolset_deferring_its_tools_defers_its_server() -> None:
    raw = body(tools=[REGEX, deferred_toolset("calc")], mcp_servers=SERVERS)
    calc, docs = [t for t in decode_messages(raw).settings.tools if t["type"] == "mcp"]
    assert (calc["server_label"], calc.get("defer_loading")) == ("calc", True)
    assert (docs["server_label"], docs.get("defer_loading")) == ("docs", None)


def test_a_search_loading_mcp_tools_references_them_by_their_own_names() -> None:
    """As the connector's ``mcp_tool_use`` blocks name them (its ``server_name`` apart)."""
    item = {
        "id": "tso_1",
        "type": "tool_search_output",
        "status": "completed",
        "tools": [
            {"type": "function", "name": "get_weather"},
            {"type": "mcp", "server_label": "calc", "allowed_tools": ["add", "sub"]},
            {"type": "mcp", "server_label": "docs"},  # all of a server's: nothing to name
        ],
    }
    references = tool_search.block(item, "tool_search_tool_regex")["content"]["tool_references"]
    assert [r["tool_name"] for r in references] == ["get_weather", "add", "sub"]


def mcp_history(*blocks: dict[str, Any], deferred: tuple[str, ...] = ("calc", "docs")) -> bytes:
    """``history``'s body beside the MCP connector's two servers, ``deferred`` ones deferred."""
    return body(
        tools=[REGEX, WEATHER, *(deferred_toolset(s) for s in deferred)],
        mcp_servers=SERVERS,
        messages=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": list(blocks)},
            {"role": "user", "content": "go"},
        ],
    )


def test_a_reference_to_no_declared_tool_loads_it_from_the_deferred_servers() -> None:
    """The servers' tools are known only once listed, when the request runs: each deferred
    server loads it if it has it (:meth:`Catalog.load_mcp`)."""
    found = {
        **FOUND,
        "tool_references": [
            *FOUND["tool_references"],
            {"type": "tool_reference", "tool_name": "add"},
            {"type": "tool_reference", "tool_name": "search"},
        ],
    }
    _, _, output, _ = decode_messages(mcp_history(USE, result(found))).input
    assert [t["name"] for t in output["tools"] if t["type"] == "function"] == ["get_weather"]
    assert [t for t in output["tools"] if t["type"] != "function"] == [
        {"type": "mcp", "server_label": "calc", "allowed_tools": ["add", "search"]},
        {"type": "mcp", "server_label": "docs", "allowed_tools": ["add", "search"]},
    ]


def test_a_reference_beside_servers_not_deferred_loads_nothing_and_is_no_400() -> None:
    """Their tools are offered anyway, and the name may be one of theirs."""
    found = {**FOUND, "tool_references": [{"type": "tool_reference", "tool_name": "add"}]}
    _, _, output, _ = decode_messages(mcp_history(USE, result(found), deferred=())).input
    assert output["tools"] == []
