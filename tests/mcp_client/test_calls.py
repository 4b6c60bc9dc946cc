"""Listing and calling tools of a real MCP server, over both transports."""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

import httpx2
import mcp_types as types
import orjson
import pytest

from stateway.core.tools.ports import McpServer, McpTransport, ToolError, ToolFailure
from stateway.mcp_client.pool import MAX_LISTED_TOOLS, PooledMcpClient
from stateway.mcp_client.transports import STREAM_READ_TIMEOUT
from tests.support.hostile_mcp_server import serve_endless_listing, serve_notification_flood
from tests.support.mcp_server import PICTURE_PNG, TOOLS, RunningMcpServer

TRANSPORTS: list[McpTransport] = ["streamable_http", "sse"]


def server_for(running: RunningMcpServer, transport: McpTransport = "streamable_http") -> McpServer:
    url = running.sse_url if transport == "sse" else running.url
    return McpServer(label="test", url=url, transport=transport)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_list_tools_follows_every_page(
    mcp_server: RunningMcpServer, pool: PooledMcpClient, transport: McpTransport
) -> None:
    tools = await pool.list_tools(server_for(mcp_server, transport))

    assert [tool.name for tool in tools] == [tool.name for tool in TOOLS]  # 9 tools, pages of 3
    add = tools[0]
    assert add.description == "Add two integers."
    assert add.input_schema["properties"] == {"a": {"type": "integer"}, "b": {"type": "integer"}}
    assert add.annotations == {"readOnlyHint": True}
    assert add.parallel_safe
    assert tools[1].annotations is None
    assert not tools[1].parallel_safe


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_call_tool_returns_text(
    mcp_server: RunningMcpServer, pool: PooledMcpClient, transport: McpTransport
) -> None:
    server = server_for(mcp_server, transport)

    assert await pool.call_tool(server, "add", {"a": 2, "b": 3}) == "5"
    assert await pool.call_tool(server, "echo", {"text": "héllo\nworld"}) == "héllo\nworld"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_call_silent_past_the_connect_timeout_is_answered(
    mcp_server: RunningMcpServer, transport: McpTransport
) -> None:
    """A long tool call answers on a stream silent meanwhile: its reads wait
    ``STREAM_READ_TIMEOUT``, not the connect timeout (nor httpx's 5 s default), which is
    shortened here so that a read bounded by it would fail the call."""
    pool = PooledMcpClient(connect_timeout=1.0)
    try:
        server = server_for(mcp_server, transport)
        assert await pool.call_tool(server, "sleep", {"seconds": 1.5}) == "slept"
    finally:
        await pool.aclose()


async def test_a_streamable_http_sessions_reads_wait_the_stream_read_timeout(
    mcp_server: RunningMcpServer, pool: PooledMcpClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the call above cannot see short of a silence past httpx's 5 s: the session's
    client is built with ``STREAM_READ_TIMEOUT`` for its reads, not left to that default.
    Read off every client the call builds."""
    built: list[httpx2.AsyncClient] = []

    class Recorded(httpx2.AsyncClient):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            built.append(self)

    monkeypatch.setattr(httpx2, "AsyncClient", Recorded)

    assert await pool.call_tool(server_for(mcp_server), "add", {"a": 2, "b": 3}) == "5"
    assert built
    assert {client.timeout.read for client in built} == {STREAM_READ_TIMEOUT}


async def test_other_contents_are_compact_json(
    mcp_server: RunningMcpServer, pool: PooledMcpClient
) -> None:
    text = await pool.call_tool(server_for(mcp_server), "picture", {})

    first, second = text.split("\n")
    assert first == "a picture"
    assert " " not in second
    assert orjson.loads(second) == {"type": "image", "data": PICTURE_PNG, "mimeType": "image/png"}


async def test_structured_content_when_there_is_no_content(
    mcp_server: RunningMcpServer, pool: PooledMcpClient
) -> None:
    assert await pool.call_tool(server_for(mcp_server), "tally", {}) == '{"count":3}'


async def test_a_server_refusing_streamable_http_is_spoken_to_over_sse(
    mcp_server: RunningMcpServer, pool: PooledMcpClient
) -> None:
    """A request's ``server_url`` says nothing of the transport: an SSE server answers the
    Streamable HTTP ``initialize`` POST with 405, and the client falls back to SSE, as
    the MCP specification's backwards compatibility asks (and as hosted APIs do)."""
    server = McpServer(label="test", url=mcp_server.sse_url)  # transport: streamable_http

    assert [tool.name for tool in await pool.list_tools(server)] == [t.name for t in TOOLS]
    assert await pool.call_tool(server, "add", {"a": 2, "b": 3}) == "5"
    assert pool.initializations == 1
    assert mcp_server.stats.initializations == 1


async def test_an_output_within_max_output_bytes_arrives_whole_over_streamable_http(
    mcp_server: RunningMcpServer, pool: PooledMcpClient
) -> None:
    """A result is one SSE event carrying its text, JSON-escaped, and often a structured
    copy of it: the event limit leaves room for any output under ``max_output_bytes``
    (1 MiB by default), not the SDK's 1 MiB per event, which failed such a call as a
    closed connection."""
    text = 'a "quoted"\n line ' * 60_000  # 1,020,000 bytes, 1.2 MB escaped

    assert await pool.call_tool(server_for(mcp_server), "echo", {"text": text}) == text


async def test_max_output_bytes_raises_the_event_limit(mcp_server: RunningMcpServer) -> None:
    pool = PooledMcpClient(max_output_bytes=3 * 1024 * 1024)
    text = "x" * (2 * 1024 * 1024)
    try:
        assert await pool.call_tool(server_for(mcp_server), "echo", {"text": text}) == text
    finally:
        await pool.aclose()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_error_result_is_a_tool_failure_and_keeps_the_session(
    mcp_server: RunningMcpServer, pool: PooledMcpClient, transport: McpTransport
) -> None:
    server = server_for(mcp_server, transport)

    with pytest.raises(ToolFailure) as failure:
        await pool.call_tool(server, "fail", {"message": "the disk is full"})
    content = [{"type": "text", "text": "the disk is full"}]
    assert failure.value.error == ToolError.execution(content, "the disk is full")

    assert await pool.call_tool(server, "add", {"a": 1, "b": 1}) == "2"
    assert pool.initializations == 1


async def test_a_json_rpc_error_names_the_server_and_keeps_the_session(
    mcp_server: RunningMcpServer, pool: PooledMcpClient
) -> None:
    server = server_for(mcp_server)

    with pytest.raises(ToolFailure) as failure:
        await pool.call_tool(server, "nope", {})
    unknown = "MCP server 'test' returned an error: Unknown tool: nope"
    assert failure.value.error == ToolError.protocol(-32602, unknown)
    with pytest.raises(ToolFailure) as own:
        await pool.call_tool(server, "refuse", {"code": -32042, "message": "go to a URL"})
    assert own.value.error.code == -32042  # the server's code, as it sent it

    assert await pool.call_tool(server, "echo", {"text": "still here"}) == "still here"
    assert pool.initializations == 1
    assert mcp_server.stats.initializations == 1


async def test_a_server_error_echoing_a_header_value_does_not_pass_it_on(
    mcp_server: RunningMcpServer, pool: PooledMcpClient
) -> None:
    """The model, the client and the stored response read the server's message: a
    credential it echoes is masked, as an upstream's echoed key is."""
    token = "sekrit-token-1234567"
    server = McpServer("test", mcp_server.url, (("Authorization", f"Bearer {token}"),))

    message = f"the token {token.upper()} expired (sent: Bearer {token})"
    with pytest.raises(ToolFailure) as failure:
        await pool.call_tool(server, "refuse", {"code": -32042, "message": message})

    error = failure.value.error
    assert (error.kind, error.code) == ("protocol", -32042)
    assert "sekrit" not in error.message.lower()
    assert error.message == "MCP server 'test' returned an error: the token*** expired (sent: ***)"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_error_result_echoing_a_header_value_does_not_pass_it_on(
    mcp_server: RunningMcpServer, pool: PooledMcpClient, transport: McpTransport
) -> None:
    """A tool's ``isError`` result is the server's error message too: a credential it
    echoes (a configured server's, which the tenant must never read) is masked in its
    message and in its content, as in a JSON-RPC error's."""
    token = "sekrit-token-1234567"
    base = server_for(mcp_server, transport)
    server = McpServer("test", base.url, (("Authorization", f"Bearer {token}"),), transport)

    with pytest.raises(ToolFailure) as failure:
        await pool.call_tool(server, "fail", {"message": "refused; you sent {authorization}"})

    masked = "refused; you sent ***"
    assert failure.value.error == ToolError.execution([{"type": "text", "text": masked}], masked)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_headers_reach_the_server_and_split_the_pool(
    mcp_server: RunningMcpServer, pool: PooledMcpClient, transport: McpTransport
) -> None:
    base = server_for(mcp_server, transport)
    alice = McpServer(base.label, base.url, (("Authorization", "Bearer alice"),), transport)
    bob = McpServer(base.label, base.url, (("Authorization", "Bearer bob"),), transport)

    assert await pool.call_tool(alice, "whoami", {}) == "Bearer alice"
    assert await pool.call_tool(bob, "whoami", {}) == "Bearer bob"
    assert await pool.call_tool(alice, "whoami", {}) == "Bearer alice"
    assert await pool.call_tool(base, "whoami", {}) == "anonymous"

    assert pool.initializations == 3
    assert mcp_server.stats.initializations == 3


async def test_calls_send_nothing_but_the_call(
    mcp_server: RunningMcpServer, pool: PooledMcpClient
) -> None:
    server = server_for(mcp_server)

    for _ in range(3):
        assert await pool.call_tool(server, "tally", {}) == '{"count":3}'  # on a later page

    assert mcp_server.stats.listings == 0
    await pool.list_tools(server)
    assert mcp_server.stats.listings == -(-len(TOOLS) // 3)  # every page, of 3 tools


@pytest.mark.parametrize(
    ("status", "message"),
    [(401, "refused the credentials (HTTP 401)"), (500, "answered HTTP 500")],
)
async def test_a_call_the_servers_http_layer_refuses_is_an_http_error(
    mcp_server: RunningMcpServer, pool: PooledMcpClient, status: int, message: str
) -> None:
    server = server_for(mcp_server)
    assert await pool.call_tool(server, "add", {"a": 1, "b": 1}) == "2"

    with pytest.raises(ToolFailure) as failure:
        await pool.call_tool(server, "refuse", {"status": status})
    assert failure.value.error == ToolError.http(status, f"MCP server 'test' {message}")

    assert await pool.call_tool(server, "add", {"a": 2, "b": 2}) == "4"  # on a new session
    assert pool.initializations == 2


async def test_a_call_answered_404_every_time_is_an_http_error_after_new_sessions(
    mcp_server: RunningMcpServer, pool: PooledMcpClient
) -> None:
    """A 404 to a request carrying the session id reads as a forgotten session: retried on
    new sessions, then given up as the server's answer."""
    server = server_for(mcp_server)

    with pytest.raises(ToolFailure) as failure:
        await pool.call_tool(server, "refuse", {"status": 404})
    assert failure.value.error == ToolError.http(404, "MCP server 'test' answered HTTP 404")
    assert mcp_server.stats.initializations == 3  # MAX_ATTEMPTS sessions


async def test_the_session_id_a_server_gives_is_masked_in_the_log(
    mcp_server: RunningMcpServer, pool: PooledMcpClient, caplog: pytest.LogCaptureFixture
) -> None:
    """The SDK's client logs the ``mcp-session-id`` it receives (``info``): masked."""
    caplog.set_level(logging.INFO)
    assert await pool.call_tool(server_for(mcp_server), "add", {"a": 2, "b": 3}) == "5"

    received = [r.getMessage() for r in caplog.records if r.name == "mcp.client.streamable_http"]
    assert received
    assert all(re.fullmatch(r"Received session ID: \*\*\*#[0-9a-f]{8}", m) for m in received)
    assert not re.search(r"[0-9a-f]{32}", caplog.text)


async def test_a_listing_stops_past_the_most_tools_a_request_may_offer(
    pool: PooledMcpClient,
) -> None:
    """Pages that never end stop at the first past ``MAX_LISTED_TOOLS`` (the highest
    ``max_discovered_tools``), not after ``MAX_TOOL_PAGES`` of them: 100 pages of 70,000
    tools each held 3.6 GB."""
    with (
        serve_endless_listing(tools_per_page=3_000) as url,
        pytest.raises(ToolFailure) as failure,
    ):
        await pool.list_tools(McpServer("docs", url))

    message = f"MCP server 'docs' lists more than {MAX_LISTED_TOOLS} tools"
    assert failure.value.error == ToolError(message)


async def test_a_call_flooded_with_notifications_fails_naming_it_and_the_flood_ends() -> None:
    pool = PooledMcpClient(connect_timeout=5.0, max_notifications=500)
    try:
        with serve_notification_flood() as flood:
            server = McpServer(label="chatty", url=flood.url)
            await pool.list_tools(server)
            started = pool.initializations

            with pytest.raises(ToolFailure) as failed:
                await asyncio.wait_for(pool.call_tool(server, "flood", {}), 60)

            assert failed.value.error == ToolError.protocol(
                types.INTERNAL_ERROR,
                "MCP server 'chatty' sent more than 500 notifications during one call",
            )
            assert await asyncio.to_thread(flood.left.wait, 10)  # its session closed
            await pool.list_tools(server)
            assert pool.initializations == started + 1  # a new session
    finally:
        await pool.aclose()


async def test_an_idle_session_flooded_with_replies_to_no_request_is_closed() -> None:
    """The SDK drops each, once parsed and validated, as cheaply as a log: they count as
    notifications, or the flood would run until the session's TTL. (On a call's own
    stream the SDK takes the first for the call's answer.)"""
    pool = PooledMcpClient(connect_timeout=5.0, max_notifications=500)
    try:
        with serve_notification_flood(idle=True, replies=True) as flood:
            await pool.list_tools(McpServer(label="chatty", url=flood.url))

            assert await asyncio.to_thread(flood.left.wait, 10)  # no call runs: closed
    finally:
        await pool.aclose()


async def test_notifications_within_the_bound_leave_the_call_and_its_session_alone() -> None:
    pool = PooledMcpClient(connect_timeout=5.0, max_notifications=500)
    try:
        with serve_notification_flood(notes=450) as flood:
            server = McpServer(label="chatty", url=flood.url)

            assert await pool.call_tool(server, "flood", {}) == "done"
            assert await pool.call_tool(server, "flood", {}) == "done"  # counted per call
            assert pool.initializations == 1
    finally:
        await pool.aclose()


async def test_an_idle_session_flooded_with_notifications_is_closed() -> None:
    pool = PooledMcpClient(connect_timeout=5.0, max_notifications=500)
    try:
        with serve_notification_flood(idle=True) as flood:
            server = McpServer(label="chatty", url=flood.url)
            await pool.list_tools(server)

            assert await asyncio.to_thread(flood.left.wait, 10)  # no call runs: closed
            await pool.list_tools(server)
            assert pool.initializations == 2
    finally:
        await pool.aclose()
