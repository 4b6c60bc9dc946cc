"""An MCP server whose tools ask for input mid-call (:mod:`tests.support.asking_mcp_server`),
called by the real gateway inside a response (``require_approval: "never"``), driven by the
``openai`` SDK: the gateway has no user to ask, so each call is a failed ``mcp_call`` naming
its server and tool, the model is told, and the loop goes on to its answer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import mcp_types as types
import pytest
from openai import OpenAI
from openai.types.responses.mcp_tool_call_error import McpProtocolError

from stateway.launch import start_gateway
from tests.core.tools.wire import EVENTS
from tests.e2e.test_mcp_tools import tool
from tests.support.asking_mcp_server import serve_asking_mcp

ASKED = "MCP server 'deployer' tool 'ask' asked for input, which the gateway cannot provide"


@pytest.fixture(scope="module")
def deployer() -> Iterator[dict[str, Any]]:
    with serve_asking_mcp() as url:
        yield {
            "type": "mcp",
            "server_label": "deployer",
            "server_url": url,
            "require_approval": "never",
        }


@pytest.fixture(scope="module")
def sdk(fake_upstream: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenAI]:
    database = f"sqlite:///{tmp_path_factory.mktemp('asking') / 'stateway.db'}"
    args = ["--upstream", fake_upstream, "--upstream-api", "chat", "--database", database]
    env = {"STATEWAY_MCP_ALLOWED_HOSTS": "127.0.0.1", "STATEWAY_TOOL_TIMEOUT_S": "8"}
    with (
        start_gateway(args, env=env) as url,
        OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0, timeout=30) as client,
    ):
        yield client


def test_each_way_of_asking_fails_its_call_and_the_loop_answers(
    sdk: OpenAI, deployer: dict[str, Any]
) -> None:
    calls = "".join(tool(name, {}, "deployer") for name in ("ask", "confirm", "pick"))
    response = sdk.responses.create(
        model="m", input=calls + tool("add", {"a": 2, "b": 3}, "deployer"), tools=[deployer]
    )

    assert response.status == "completed"
    listed, *made, message = response.output
    assert listed.type == "mcp_list_tools"
    assert listed.error is None
    assert [(c.type, c.name, c.status) for c in made] == [
        ("mcp_call", "ask", "failed"),
        ("mcp_call", "confirm", "failed"),
        ("mcp_call", "pick", "failed"),
        ("mcp_call", "add", "completed"),
    ]
    asked, confirmed, picked, added = made
    assert isinstance(asked.error, McpProtocolError)
    assert (asked.error.code, asked.error.message) == (
        types.MISSING_REQUIRED_CLIENT_CAPABILITY,
        ASKED,
    )
    for failed in (confirmed, picked):  # the server's own error, naming it
        assert isinstance(failed.error, McpProtocolError)
        assert failed.error.message.startswith("MCP server 'deployer' returned an error: ")
    assert added.output == "5"  # the session went on serving
    assert message.type == "message"
    assert response.output_text == "Tool said: 5"


def test_a_streamed_call_that_asks_fails_and_the_stream_completes(
    sdk: OpenAI, deployer: dict[str, Any]
) -> None:
    with sdk.responses.with_streaming_response.create(
        model="m", input=tool("ask", {}, "deployer"), tools=[deployer], stream=True
    ) as raw:
        events = [json.loads(line[6:]) for line in raw.iter_lines() if line.startswith("data: ")]
    for event in events:
        EVENTS.validate_python(event, strict=True)
    kinds = [event["type"] for event in events]
    assert "response.mcp_call.failed" in kinds
    assert kinds[-1] == "response.completed"
    [call] = [i for i in events[-1]["response"]["output"] if i["type"] == "mcp_call"]
    assert call["error"] == {
        "type": "mcp_protocol_error",
        "code": types.MISSING_REQUIRED_CLIENT_CAPABILITY,
        "message": ASKED,
    }
    assert (
        events[-1]["response"]["output"][-1]["content"][0]["text"] == f"Tool said: Error: {ASKED}"
    )
