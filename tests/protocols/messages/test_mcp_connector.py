"""Anthropic's MCP connector on the Messages wire: ``mcp_servers`` and ``mcp_toolset`` in,
``mcp_tool_use`` and ``mcp_tool_result`` blocks out (checked with the SDK's beta types),
nothing shown of a server the client did not declare."""

from __future__ import annotations

from typing import Any

import pytest
from anthropic.types.beta import BetaMessage, BetaRawMessageStreamEvent
from pydantic import TypeAdapter

from stateway.core import events as ev
from stateway.core.generation_settings import GenerationSettings
from stateway.protocols.messages.decode import decode_messages
from stateway.protocols.messages.encode import encode_message
from stateway.protocols.messages.stream import MessagesStream
from tests.protocols.messages.test_decode import body, refused, sent_back
from tests.protocols.messages.test_encode import TEXT, frames, state

SERVER = {"type": "url", "url": "https://mcp.test/mcp", "name": "calc"}
CALL = {
    "id": "mcp_abc",
    "type": "mcp_call",
    "status": "completed",
    "server_label": "calc",
    "name": "add",
    "arguments": '{"a":2,"b":3}',
    "output": "5",
    "error": None,
    "approval_request_id": None,
}
FAILED = CALL | {
    "id": "mcp_def",
    "status": "failed",
    "output": None,
    "error": {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": "no"}]},
}
DECLARED = {"type": "mcp", "server_label": "calc", "server_url": "https://mcp.test/mcp"}


BETA_EVENTS: TypeAdapter[Any] = TypeAdapter(BetaRawMessageStreamEvent)
"""``mcp_tool_use`` and ``mcp_tool_result`` blocks are the beta API's."""


def test_servers_become_the_gateways_mcp_tools() -> None:
    configured = SERVER | {
        "name": "docs",
        "authorization_token": "tok",
        "tool_configuration": {"allowed_tools": ["search", "fetch"]},
    }
    off = SERVER | {"name": "off", "tool_configuration": {"enabled": False}}
    command = decode_messages(body(mcp_servers=[SERVER, configured, off]))
    assert command.settings.tools == [
        {
            "type": "mcp",
            "server_label": "calc",
            "server_url": "https://mcp.test/mcp",
            "require_approval": "never",
        },
        {
            "type": "mcp",
            "server_label": "docs",
            "server_url": "https://mcp.test/mcp",
            "require_approval": "never",
            "authorization": "tok",
            "allowed_tools": ["search", "fetch"],
        },
    ]


def test_a_toolset_narrows_its_servers_tools() -> None:
    toolset = {
        "type": "mcp_toolset",
        "mcp_server_name": "calc",
        "default_config": {"enabled": False},
        "configs": {"add": {"enabled": True}, "echo": {"enabled": False}},
    }
    [tool] = decode_messages(body(mcp_servers=[SERVER], tools=[toolset])).settings.tools
    assert tool["allowed_tools"] == ["add"]
    everything = {"type": "mcp_toolset", "mcp_server_name": "calc"}
    [tool] = decode_messages(body(mcp_servers=[SERVER], tools=[everything])).settings.tools
    assert "allowed_tools" not in tool
    nothing = toolset | {"configs": {}}
    assert decode_messages(body(mcp_servers=[SERVER], tools=[nothing])).settings.tools == []


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"mcp_servers": [SERVER, SERVER]}, "mcp_servers.1.name"),
        ({"mcp_servers": [SERVER | {"type": "stdio"}]}, "mcp_servers.0.type"),
        ({"mcp_servers": [{"type": "url", "name": "x"}]}, "mcp_servers.0.url"),
        ({"tools": [{"type": "mcp_toolset", "mcp_server_name": "calc"}]}, "tools"),
        (
            {
                "mcp_servers": [SERVER],
                "tools": [
                    {
                        "type": "mcp_toolset",
                        "mcp_server_name": "calc",
                        "configs": {"add": {"enabled": False}},
                    }
                ],
            },
            "tools",
        ),
        (
            {
                "mcp_servers": [SERVER],
                "tools": [
                    {"type": "mcp_toolset", "mcp_server_name": "calc"},
                    {"type": "mcp_toolset", "mcp_server_name": "calc"},
                ],
            },
            "tools.1.mcp_server_name",
        ),
    ],
)
def test_bad_connector_input_is_a_400_naming_the_field(fields: dict[str, Any], named: str) -> None:
    error = refused(body(**fields))
    assert error.param == named


def test_a_declared_servers_calls_are_shown_and_come_back_as_they_were() -> None:
    shown = state(output=[CALL, FAILED, TEXT], settings=GenerationSettings(tools=[DECLARED]))
    wire = encode_message(shown)
    message = BetaMessage.model_validate(wire)
    use, result, failed_use, failed, text = message.content
    assert use.type == "mcp_tool_use"
    assert (use.id, use.name, use.server_name, use.input) == (
        "mcptoolu_abc",
        "add",
        "calc",
        {"a": 2, "b": 3},
    )
    assert result.type == "mcp_tool_result"
    assert (result.tool_use_id, result.is_error) == ("mcptoolu_abc", False)
    assert wire["content"][1]["content"] == [{"type": "text", "text": "5"}]
    assert failed_use.type == "mcp_tool_use"
    assert failed.type == "mcp_tool_result"
    assert failed.is_error is True
    assert wire["content"][3]["content"] == [{"type": "text", "text": "no"}]
    assert text.type == "text"
    assert "server_tool_use" not in wire["usage"]

    command = decode_messages(sent_back("add", wire["content"]))
    _, call, failure, _, _ = command.input
    assert call == CALL
    assert failure == FAILED | {"error": "no"}


def test_calls_of_a_server_the_client_did_not_declare_are_not_shown() -> None:
    """A backend's ``gateway_tools`` run in hidden rounds."""
    other = DECLARED | {"server_label": "docs"}
    hidden = state(output=[CALL, TEXT], settings=GenerationSettings(tools=[other]))
    assert [block["type"] for block in encode_message(hidden)["content"]] == ["text"]
    stream = MessagesStream()
    stream.encode(ev.ResponseCreated(hidden))
    assert stream.encode(ev.ItemDone(0, CALL)) == b""


def test_a_streamed_call_is_its_two_blocks_once_it_is_done() -> None:
    shown = state(output=[CALL], settings=GenerationSettings(tools=[DECLARED]))
    stream = MessagesStream()
    stream.encode(ev.ResponseCreated(shown))
    assert stream.encode(ev.ItemAdded(0, CALL | {"status": "in_progress"})) == b""
    sent = [data for _, data in frames(stream.encode(ev.ItemDone(0, CALL)), BETA_EVENTS)]
    assert [f["type"] for f in sent] == [
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_stop",
    ]
    assert sent[0]["content_block"]["type"] == "mcp_tool_use"
    assert sent[1]["delta"] == {"type": "input_json_delta", "partial_json": '{"a":2,"b":3}'}
    assert sent[3]["content_block"]["type"] == "mcp_tool_result"


def test_a_toolset_keeps_within_the_servers_own_allowed_tools_and_order_does_not_matter() -> None:
    off = SERVER | {"name": "off", "tool_configuration": {"enabled": False}}
    empty = SERVER | {"name": "empty"}
    limited = SERVER | {"tool_configuration": {"allowed_tools": ["add", "echo"]}}
    toolsets = [
        {
            "type": "mcp_toolset",
            "mcp_server_name": "calc",
            "default_config": {"enabled": False},
            "configs": {"add": {"enabled": True}, "fail": {"enabled": True}},
        },
        {"type": "mcp_toolset", "mcp_server_name": "empty", "default_config": {"enabled": False}},
    ]
    tools = decode_messages(body(mcp_servers=[off, empty, limited], tools=toolsets)).settings.tools
    assert [(t["server_label"], t.get("allowed_tools")) for t in tools] == [("calc", ["add"])]


@pytest.mark.parametrize(
    "url",
    ["http://mcp.test:99999/mcp", "http://[mcp.test/mcp", "https://mcp.test/m cp", "mcp.test"],
)
def test_a_server_url_that_is_no_http_url_is_refused_by_its_field(url: str) -> None:
    """Named as the Messages wire names it (``mcp_servers.N.url``), not as the ``mcp``
    tool it becomes (``server_url``), which this client never sent."""
    error = refused(body(mcp_servers=[SERVER, SERVER | {"name": "docs", "url": url}]))
    assert (error.code, error.param) == ("invalid_value", "mcp_servers.1.url")
    assert error.message.startswith("mcp_servers.1.url: ")
    assert "server_url" not in error.message


def test_a_server_url_carrying_credentials_is_refused_by_its_field() -> None:
    """The connector's credential is its ``authorization_token``, never kept; a URL is
    stored with a thread's tools. The 400 does not repeat it."""
    leaky = SERVER | {"name": "docs", "url": "https://alice:hush-hush@mcp.test/mcp"}
    error = refused(body(mcp_servers=[SERVER, leaky]))
    assert (error.code, error.param) == ("invalid_value", "mcp_servers.1.url")
    assert error.message.startswith("mcp_servers.1.url: the URL must not carry credentials")
    assert "authorization_token" in error.message
    assert "hush" not in error.message


def test_connector_errors_say_what_is_wrong() -> None:
    twice = refused(body(mcp_servers=[SERVER, SERVER]))
    assert (twice.code, twice.message) == (
        "invalid_value",
        "mcp_servers.1.name: MCP server names must be unique; 'calc' is given twice.",
    )
    orphan = refused(body(tools=[{"type": "mcp_toolset", "mcp_server_name": "calc"}]))
    assert orphan.code == "invalid_value"
    assert "names the MCP server 'calc', which mcp_servers does not declare" in orphan.message
    disabling = {
        "type": "mcp_toolset",
        "mcp_server_name": "calc",
        "configs": {"add": {"enabled": False}, "echo": {"enabled": False}},
    }
    deny = refused(body(mcp_servers=[SERVER], tools=[disabling]))
    assert deny.code == "invalid_value"
    assert "disables single tools (add, echo)" in deny.message
    assert "set default_config.enabled to false and enable the tools to offer." in deny.message
    stray = refused(
        body(
            messages=[
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "mcp_tool_result",
                            "tool_use_id": "mcptoolu_x",
                            "content": "5",
                        }
                    ],
                },
            ]
        )
    )
    assert stray.code == "tool_call_not_found"
    assert stray.message == (
        "messages.1.content.0.tool_use_id: unexpected tool_use_id 'mcptoolu_x' found in a "
        "mcp_tool_result block: it must follow the block of the call it answers."
    )


def test_results_and_errors_of_every_shape_come_back_as_text() -> None:
    use = {"type": "mcp_tool_use", "id": "mcptoolu_a", "name": "add", "server_name": "calc"}

    def sent_back(result: dict[str, Any]) -> dict[str, Any]:
        command = decode_messages(
            body(
                messages=[
                    {"role": "user", "content": "add"},
                    {
                        "role": "assistant",
                        "content": [
                            use | {"input": {"a": 1}},
                            {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_a"} | result,
                        ],
                    },
                ]
            )
        )
        call: dict[str, Any] = command.input[1]
        return call

    assert sent_back({"content": "5"})["output"] == "5"
    two = [{"type": "text", "text": "5"}, {"type": "text", "text": "!"}]
    assert sent_back({"content": two})["output"] == "5!"
    failed = sent_back({"content": "boom", "is_error": True})
    assert (failed["status"], failed["error"], failed["output"]) == ("failed", "boom", None)


def test_what_a_call_shows_when_its_parts_are_missing_or_odd() -> None:
    protocol = FAILED | {"error": {"type": "mcp_protocol_error", "code": -32000, "message": "x"}}
    parts = FAILED | {
        "error": {
            "type": "mcp_tool_execution_error",
            "content": [
                {"type": "text", "text": "a"},
                {"type": "image"},
                {"type": "text", "text": "b"},
            ],
        }
    }
    plain = FAILED | {"error": "plain words"}
    odd_arguments = CALL | {"arguments": "[1, 2]", "output": None}
    broken_arguments = CALL | {"arguments": "{nope"}
    shown = state(
        output=[protocol, parts, plain, odd_arguments, broken_arguments],
        settings=GenerationSettings(tools=[DECLARED]),
    )
    content = encode_message(shown)["content"]
    texts = [block["content"][0]["text"] for block in content[1::2]]
    assert texts == ["x", "ab", "plain words", "", "5"]
    assert content[6]["input"] == {}
    assert content[8]["input"] == {}
    stream = MessagesStream()
    stream.encode(ev.ResponseCreated(shown))
    [(_, start), *_] = frames(stream.encode(ev.ItemDone(0, CALL)), BETA_EVENTS)
    assert start["content_block"] == {
        "type": "mcp_tool_use",
        "id": "mcptoolu_abc",
        "name": "add",
        "server_name": "calc",
        "input": {},
    }


def test_a_failed_call_without_a_readable_error_says_it_failed() -> None:
    shown = state(
        output=[FAILED | {"error": None}, FAILED | {"error": {"type": "http_error"}}],
        settings=GenerationSettings(tools=[DECLARED]),
    )
    content = encode_message(shown)["content"]
    assert [block["content"][0]["text"] for block in content[1::2]] == ["The call failed.", ""]


def test_another_server_tool_sent_back_is_refused_by_name() -> None:
    fetch = {"type": "server_tool_use", "id": "srvtoolu_f", "name": "web_fetch", "input": {}}
    error = refused(
        body(
            messages=[
                {"role": "user", "content": "fetch"},
                {"role": "assistant", "content": [fetch]},
            ]
        )
    )
    assert (error.code, error.param) == ("invalid_value", "messages.1.content.0.name")
    assert error.message == (
        "messages.1.content.0.name: server tool 'web_fetch' is not supported; only web_search is."
    )
