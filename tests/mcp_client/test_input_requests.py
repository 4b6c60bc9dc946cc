"""A real MCP server's tools asking for input mid-call (:mod:`tests.support.asking_mcp_server`):
the gateway has no user to ask, so each call fails, naming its server (and, when the server
asked in a reply, its tool), and the session goes on serving."""

from __future__ import annotations

from collections.abc import Iterator

import mcp_types as types
import pytest

from stateway.core.tools.ports import McpServer, McpTransport, ToolFailure
from stateway.mcp_client.pool import PooledMcpClient
from tests.support.asking_mcp_server import serve_asking_mcp


@pytest.fixture(params=["streamable_http", "sse"])
def asking(request: pytest.FixtureRequest) -> Iterator[McpServer]:
    transport: McpTransport = request.param
    with serve_asking_mcp(transport) as url:
        yield McpServer(label="deployer", url=url, transport=transport)


async def test_an_input_required_answer_fails_the_call_and_keeps_the_session(
    asking: McpServer, pool: PooledMcpClient
) -> None:
    with pytest.raises(ToolFailure) as failure:
        await pool.call_tool(asking, "ask", {})

    message = "MCP server 'deployer' tool 'ask' asked for input, which the gateway cannot provide"
    assert (failure.value.error.kind, failure.value.error.message) == ("protocol", message)
    assert failure.value.error.code == types.MISSING_REQUIRED_CLIENT_CAPABILITY
    assert await pool.call_tool(asking, "add", {"a": 2, "b": 3}) == "5"
    assert pool.initializations == 1  # a well-formed answer: the session is kept


@pytest.mark.parametrize(
    ("tool", "code", "said"),
    [
        ("confirm", types.INVALID_REQUEST, "Elicitation not supported"),
        ("pick", types.MISSING_REQUIRED_CLIENT_CAPABILITY, "form elicitation capability"),
    ],
)
async def test_an_elicitation_the_server_asks_for_fails_the_call_with_its_error(
    asking: McpServer, pool: PooledMcpClient, tool: str, code: int, said: str
) -> None:
    with pytest.raises(ToolFailure) as failure:
        await pool.call_tool(asking, tool, {})

    error = failure.value.error
    assert error.message.startswith("MCP server 'deployer' returned an error: ")
    assert (error.code, said in error.message) == (code, True)
    assert await pool.call_tool(asking, "add", {"a": 1, "b": 1}) == "2"
    assert pool.initializations == 1
