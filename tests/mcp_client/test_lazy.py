"""The client the gateway holds: nothing built until the first listing or call, then one
pooled client with the settings it was given, closed with it."""

from __future__ import annotations

import pytest

from stateway.core.tools.ports import McpServer, ToolFailure
from stateway.mcp_client import LazyMcpClient
from tests.support.mcp_server import TOOLS, RunningMcpServer, hanging_server

from .test_calls import server_for


async def test_nothing_is_built_before_the_first_use_nor_by_closing() -> None:
    client = LazyMcpClient()

    await client.aclose()

    assert not client.loaded


async def test_the_first_listing_builds_one_pool_that_serves_every_later_use(
    mcp_server: RunningMcpServer,
) -> None:
    client = LazyMcpClient(connect_timeout=5.0)
    server = server_for(mcp_server)
    try:
        tools = await client.list_tools(server)
        assert client.loaded
        pool = client._pool()
        assert await client.call_tool(server, "add", {"a": 2, "b": 3}) == "5"
        assert client._pool() is pool
        assert pool.initializations == 1
    finally:
        await client.aclose()

    assert [tool.name for tool in tools] == [tool.name for tool in TOOLS]
    assert pool.open_sessions == 0  # closed with the lazy client


async def test_a_call_first_builds_the_pool_too(mcp_server: RunningMcpServer) -> None:
    client = LazyMcpClient(connect_timeout=5.0)
    try:
        assert await client.call_tool(server_for(mcp_server), "add", {"a": 1, "b": 1}) == "2"
        assert client.loaded
    finally:
        await client.aclose()


async def test_the_pool_is_built_with_the_settings_given() -> None:
    """``connect_timeout`` reaches the pool: a server that never answers fails in it."""
    client = LazyMcpClient(connect_timeout=0.2)
    try:
        with hanging_server() as url, pytest.raises(ToolFailure, match=r"handshake within 0\.2 s"):
            await client.list_tools(McpServer(label="hanging", url=url))
    finally:
        await client.aclose()
