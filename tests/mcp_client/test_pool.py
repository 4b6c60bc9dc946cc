"""Session pooling: reuse, one handshake for concurrent first users, expiry, cancellation,
a server that forgot the session, and closing without leftovers. Counted on both sides:
the client's ``initializations`` and the sessions the server itself initialized."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from stateway.core.tools.ports import McpServer, ToolFailure
from stateway.mcp_client.pool import PooledMcpClient
from tests.support.mcp_server import RunningMcpServer, ServerStats, hanging_server, serve_mcp

from .test_calls import TRANSPORTS, McpTransport, server_for


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def wait_for_server(stats: ServerStats, closed: int) -> None:
    reached = await asyncio.to_thread(stats.wait_for, lambda s: s.closed_sessions >= closed, 10)
    assert reached, f"the server saw {stats.closed_sessions} sessions closed, not {closed}"


def other_tasks() -> set[asyncio.Task[object]]:
    return {task for task in asyncio.all_tasks() if task is not asyncio.current_task()}


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_one_session_serves_many_calls_and_listings(
    mcp_server: RunningMcpServer, pool: PooledMcpClient, transport: McpTransport
) -> None:
    server = server_for(mcp_server, transport)

    for n in range(15):
        assert await pool.call_tool(server, "add", {"a": n, "b": 1}) == str(n + 1)
    await pool.list_tools(server)
    await pool.list_tools(server)

    assert pool.initializations == 1
    assert mcp_server.stats.initializations == 1
    assert pool.open_sessions == 1


async def test_tenants_never_share_a_session(
    mcp_server: RunningMcpServer, pool: PooledMcpClient
) -> None:
    """A server may keep state per session (a page, a working directory): the same server
    used by two tenants is two sessions."""
    server = server_for(mcp_server)
    acme, globex = replace(server, tenant="acme"), replace(server, tenant="globex")
    for _ in range(3):
        assert await pool.call_tool(acme, "add", {"a": 1, "b": 1}) == "2"
        assert await pool.call_tool(globex, "add", {"a": 2, "b": 2}) == "4"
    assert pool.initializations == 2
    assert mcp_server.stats.initializations == 2
    assert pool.open_sessions == 2


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_concurrent_first_users_share_one_handshake(
    mcp_server: RunningMcpServer, pool: PooledMcpClient, transport: McpTransport
) -> None:
    server = server_for(mcp_server, transport)

    results = await asyncio.gather(
        *(pool.call_tool(server, "echo", {"text": str(n)}) for n in range(12)),
        pool.list_tools(server),
    )

    assert results[:12] == [str(n) for n in range(12)]
    assert pool.initializations == 1
    assert mcp_server.stats.initializations == 1


async def test_concurrent_calls_run_at_once_on_one_session(
    mcp_server: RunningMcpServer, pool: PooledMcpClient
) -> None:
    server = server_for(mcp_server)
    await pool.call_tool(server, "add", {"a": 0, "b": 0})

    async with asyncio.timeout(4):  # 8 sleeps of 1 s would take 8 s one after another
        results = await asyncio.gather(
            *(pool.call_tool(server, "sleep", {"seconds": 1}) for _ in range(8))
        )

    assert results == ["slept"] * 8
    assert pool.initializations == 1


async def test_a_session_idle_past_its_ttl_is_replaced(mcp_server: RunningMcpServer) -> None:
    clock = Clock()
    pool = PooledMcpClient(session_ttl=60, clock=clock)
    server = server_for(mcp_server)
    try:
        await pool.call_tool(server, "add", {"a": 1, "b": 2})
        clock.now += 59
        await pool.call_tool(server, "add", {"a": 1, "b": 2})
        assert pool.initializations == 1  # used within its TTL: kept, and the TTL restarts

        clock.now += 60
        assert await pool.call_tool(server, "add", {"a": 1, "b": 2}) == "3"
        assert pool.initializations == 2
        assert mcp_server.stats.initializations == 2
        await wait_for_server(mcp_server.stats, closed=1)  # the expired one said goodbye
    finally:
        await pool.aclose()


async def test_an_idle_session_closes_itself(mcp_server: RunningMcpServer) -> None:
    pool = PooledMcpClient(session_ttl=0.2)
    server = server_for(mcp_server)
    try:
        await pool.call_tool(server, "add", {"a": 1, "b": 2})

        await wait_for_server(mcp_server.stats, closed=1)  # no call needed to close it

        assert await pool.call_tool(server, "add", {"a": 2, "b": 2}) == "4"
        assert pool.initializations == 2
    finally:
        await pool.aclose()


async def test_sessions_past_max_sessions_crowd_out_the_least_recently_used_idle_ones(
    mcp_server: RunningMcpServer,
) -> None:
    """Every distinct header set is a session of its own: requests varying one (a request
    id) must not pile up a session each for the whole TTL."""
    pool = PooledMcpClient(max_sessions=3)
    server = server_for(mcp_server)
    try:
        for n in range(10):
            traced = replace(server, headers=(("X-Request-Id", f"r{n}"),))
            assert await pool.call_tool(traced, "add", {"a": n, "b": 1}) == str(n + 1)
            assert len(pool._current) <= 3
        assert pool.initializations == 10
        await wait_for_server(mcp_server.stats, closed=7)  # the crowded-out ones said goodbye
        assert len(pool._current) == 3

        kept = replace(server, headers=(("X-Request-Id", "r9"),))
        assert await pool.call_tool(kept, "add", {"a": 1, "b": 1}) == "2"
        assert pool.initializations == 10  # the most recent one was kept
    finally:
        await pool.aclose()


async def test_a_busy_session_is_not_crowded_out(mcp_server: RunningMcpServer) -> None:
    pool = PooledMcpClient(max_sessions=1)
    server = server_for(mcp_server)
    other = replace(server, headers=(("X-Other", "1"),))
    try:
        busy = asyncio.create_task(pool.call_tool(server, "sleep", {"seconds": 0.5}))
        await asyncio.to_thread(mcp_server.stats.wait_for, lambda s: s.calls_started >= 1, 10)
        assert await pool.call_tool(other, "add", {"a": 1, "b": 1}) == "2"
        assert await busy == "slept"  # over the cap for a while, never cut off
    finally:
        await pool.aclose()


async def test_a_busy_session_does_not_expire(mcp_server: RunningMcpServer) -> None:
    pool = PooledMcpClient(session_ttl=0.3)
    server = server_for(mcp_server)
    try:
        assert await pool.call_tool(server, "sleep", {"seconds": 0.8}) == "slept"
        assert mcp_server.stats.closed_sessions == 0
    finally:
        await pool.aclose()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_cancelled_call_leaves_the_pool_usable(
    mcp_server: RunningMcpServer, pool: PooledMcpClient, transport: McpTransport
) -> None:
    server = server_for(mcp_server, transport)
    await pool.call_tool(server, "add", {"a": 1, "b": 1})
    tasks_before = other_tasks()

    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.3):
            await pool.call_tool(server, "sleep", {"seconds": 30})

    assert await pool.call_tool(server, "add", {"a": 2, "b": 3}) == "5"
    assert await pool.call_tool(server, "echo", {"text": "after"}) == "after"
    assert pool.initializations == 1  # the health check passed: the same session goes on
    assert other_tasks() == tasks_before


async def test_a_call_cancelled_during_the_handshake_does_not_waste_it(
    mcp_server: RunningMcpServer, pool: PooledMcpClient
) -> None:
    server = server_for(mcp_server)

    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0):
            await pool.call_tool(server, "add", {"a": 1, "b": 1})

    assert await pool.call_tool(server, "add", {"a": 1, "b": 1}) == "2"
    assert pool.initializations == 1


async def test_a_session_the_server_forgot_is_replaced_transparently() -> None:
    pool = PooledMcpClient()
    try:
        with serve_mcp(graceful_shutdown=0) as first:
            server = server_for(first)
            assert await pool.call_tool(server, "add", {"a": 1, "b": 1}) == "2"
            port = first.port
        with serve_mcp(
            port=port, graceful_shutdown=0
        ) as restarted:  # the same URL, no memory of the session
            assert await pool.call_tool(server, "add", {"a": 2, "b": 2}) == "4"
            assert restarted.stats.initializations == 1
        assert pool.initializations == 2
    finally:
        await pool.aclose()


async def test_aclose_ends_every_session_and_task(mcp_server: RunningMcpServer) -> None:
    tasks_before = other_tasks()
    pool = PooledMcpClient()
    http = server_for(mcp_server)
    sse = server_for(mcp_server, "sse")
    keyed = McpServer("test", http.url, (("Authorization", "Bearer k"),))
    await asyncio.gather(
        pool.call_tool(http, "add", {"a": 1, "b": 1}),
        pool.call_tool(sse, "add", {"a": 1, "b": 1}),
        pool.call_tool(keyed, "add", {"a": 1, "b": 1}),
    )
    assert pool.open_sessions == 3

    await pool.aclose()

    assert pool.open_sessions == 0
    assert other_tasks() == tasks_before
    await wait_for_server(mcp_server.stats, closed=3)
    with pytest.raises(ToolFailure, match="the client is closed") as closed:
        await pool.call_tool(http, "add", {"a": 1, "b": 1})
    assert (closed.value.error.kind, closed.value.error.code) == ("protocol", -32000)


async def test_aclose_with_calls_in_flight_fails_them_cleanly(
    mcp_server: RunningMcpServer,
) -> None:
    tasks_before = other_tasks()
    pool = PooledMcpClient()
    server = server_for(mcp_server)
    await pool.call_tool(server, "add", {"a": 1, "b": 1})
    call = asyncio.create_task(pool.call_tool(server, "sleep", {"seconds": 30}))
    started = await asyncio.to_thread(mcp_server.stats.wait_for, lambda s: s.calls_started == 2)
    assert started

    async with asyncio.timeout(10):
        await pool.aclose()
        with pytest.raises(ToolFailure, match="MCP server 'test' closed the connection"):
            await call

    assert other_tasks() == tasks_before


async def test_a_session_that_stops_answering_after_a_cancelled_call_is_replaced(
    mcp_server: RunningMcpServer,
) -> None:
    pool = PooledMcpClient(connect_timeout=0.5)
    server = server_for(mcp_server)
    try:
        await pool.call_tool(server, "add", {"a": 1, "b": 1})
        mcp_server.stats.hang_pings = True

        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await pool.call_tool(server, "sleep", {"seconds": 30})

        async with asyncio.timeout(5):  # waits for the health check (0.5 s), then a new session
            assert await pool.call_tool(server, "add", {"a": 2, "b": 2}) == "4"
        assert pool.initializations == 2
        assert mcp_server.stats.initializations == 2
    finally:
        await pool.aclose()


async def test_aclose_abandons_a_handshake_in_progress() -> None:
    tasks_before = other_tasks()
    pool = PooledMcpClient(connect_timeout=60)
    with hanging_server() as url:
        call = asyncio.create_task(pool.call_tool(McpServer("slow", url), "add", {}))
        await asyncio.sleep(0)  # the call checks out its session: the handshake starts

        async with asyncio.timeout(5):  # not the 60 s handshake deadline
            await pool.aclose()
            with pytest.raises(ToolFailure, match="MCP server 'slow' closed the connection"):
                await call

    assert other_tasks() == tasks_before


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_sessions_share_one_tls_context(
    mcp_server: RunningMcpServer,
    pool: PooledMcpClient,
    transport: McpTransport,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every session has its own HTTP client; each building its own TLS context loaded the
    system's CA certificates again (~0.9 MB each, for an ``http://`` server too), so a pool
    of sessions varying a header held hundreds of MB of copies of them."""
    import httpcore2

    built: list[object] = []
    default_ssl_context = httpcore2.default_ssl_context

    def counted(**kwargs: bool) -> object:
        context = default_ssl_context(**kwargs)
        built.append(context)
        return context

    monkeypatch.setattr(httpcore2, "default_ssl_context", counted)
    server = server_for(mcp_server, transport)
    for n in range(4):
        tenant_server = replace(server, headers=(("X-Caller", str(n)),))
        assert await pool.call_tool(tenant_server, "add", {"a": n, "b": 1}) == str(n + 1)
    assert mcp_server.stats.initializations == 4
    assert len(built) <= 1
