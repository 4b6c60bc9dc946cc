"""The gateway's MCP client: :class:`PooledMcpClient` implements the core's ``McpClient``
port over sessions pooled by ``McpServer.pool_key`` (tenant, URL, transport, headers).

One initialized session per key serves every request and call (MCP multiplexes
concurrent requests on one session). A key's first users share one handshake: the pool
creates the :class:`PooledSession` synchronously on first sight of the key, so callers
arriving while it initializes wait on the same future. A session is replaced only when it
is expired (idle past ``session_ttl``), retired (a transport error, an HTTP error, a reply
that is not MCP, a closed stream, a failed health check after a cancelled call) or closed.

Idle expiry needs no reaper: each session's owner task already waits for work to end, and
waits at most until its TTL runs out; a session found expired on checkout (the owner not
yet scheduled) is retired there. A server that forgot a session (HTTP 404 to a request
carrying its id: restarted, or expired it first) is answered by one retry on a new session.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import mcp_types as types
from mcp import ClientSession
from pydantic import TypeAdapter, ValidationError

from stateway.core.tools.ports import McpServer, McpTool, ToolError, ToolFailure
from stateway.mcp_client import failures
from stateway.mcp_client.notifications import MAX_CALL_NOTIFICATIONS, NotificationFlood
from stateway.mcp_client.results import checked_text, from_wire_tool, input_required
from stateway.mcp_client.session import PooledSession
from stateway.mcp_client.transports import event_limit

T = TypeVar("T")

MAX_TOOL_PAGES = 100
"""``tools/list`` pages followed before a server's listing counts as endless."""

MAX_LISTED_TOOLS = 10_000
"""Tools taken from a server's pages before its listing fails: the most any request may
be offered (``[tools] max_discovered_tools`` at its highest), so a listing past it fails
there anyway. Without it, pages of up to an SSE event each (4 MiB) could fill
``MAX_TOOL_PAGES`` with millions of tools held at once."""

MAX_SESSIONS = 256
"""Pooled sessions kept at once by default. Every distinct ``(tenant, url, transport,
headers)`` is a session of its own, kept ``session_ttl`` once idle: without a bound, requests
varying a header (a request id, a rotating token) would pile up sessions, each holding a
task and connections, until the process runs out of file descriptors."""

MAX_ATTEMPTS = 3
"""Sessions one operation may try: a retired one found on checkout or a forgotten one
(HTTP 404 for its id) is replaced; each try is bounded by ``connect_timeout``."""

CALL_RESULT: TypeAdapter[types.CallToolResult | types.InputRequiredResult] = TypeAdapter(
    types.CallToolResult | types.InputRequiredResult
)
"""What ``tools/call`` may answer. On the sessions the gateway opens (the ``initialize``
handshake's revisions, 2025-11-25 at most) the SDK refuses an ``InputRequiredResult`` before
this reads it, as no ``CallToolResult`` (:func:`~.results.input_required` tells it apart)."""

PoolKey = tuple[str, str, str, tuple[tuple[str, str], ...]]


def _asked_for_input(server: McpServer, name: str) -> ToolFailure:
    """A call whose tool asked for input (an ``InputRequiredResult``): the gateway has no
    user to ask, and declares no capability to, so the call fails (its session is fine)."""
    message = (
        f"MCP server '{server.label}' tool '{name}' asked for input, "
        "which the gateway cannot provide"
    )
    return ToolFailure(ToolError.protocol(types.MISSING_REQUIRED_CLIENT_CAPABILITY, message))


class PooledMcpClient:
    """MCP tools of remote servers, over pooled sessions (see the module docstring)."""

    def __init__(
        self,
        *,
        session_ttl: float = 300.0,
        connect_timeout: float = 10.0,
        close_timeout: float = 5.0,
        max_sessions: int = MAX_SESSIONS,
        max_output_bytes: int = 1024 * 1024,
        max_notifications: int = MAX_CALL_NOTIFICATIONS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``session_ttl``: seconds an idle session is kept (``McpConfig.session_ttl``).
        ``connect_timeout``: seconds to connect and complete the handshake (also how long a
        suspect session's health check may take). ``close_timeout``: seconds a session's
        goodbye may take on close. ``max_sessions``: sessions kept at once; opening one more
        first closes the least recently used idle ones. ``max_output_bytes``: the longest
        output a call may return (``[tools] max_output_bytes``); a Streamable HTTP session
        takes SSE events large enough to carry it (:func:`~.transports.event_limit`).
        ``max_notifications``: messages other than replies (progress, logs) a server may
        send during one call or listing before it fails (:mod:`.notifications`).
        ``clock``: monotonic seconds (tests move it)."""
        self._ttl = session_ttl
        self._connect_timeout = connect_timeout
        self._close_timeout = close_timeout
        self._max_sessions = max_sessions
        self._max_event_bytes = event_limit(max_output_bytes)
        self._max_notifications = max_notifications
        self._clock = clock
        self._current: dict[PoolKey, PooledSession] = {}
        self._live: set[PooledSession] = set()
        self._closed = False
        self.initializations = 0
        """Sessions initialized so far (a handshake completed)."""

    @property
    def open_sessions(self) -> int:
        """Sessions whose owner task is still running (retired ones included until closed)."""
        return len(self._live)

    async def list_tools(self, server: McpServer) -> list[McpTool]:
        async def every_page(session: ClientSession) -> list[McpTool]:
            tools: list[McpTool] = []
            cursor: str | None = None
            for _ in range(MAX_TOOL_PAGES):
                params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
                page = await session.list_tools(params=params)
                tools.extend(from_wire_tool(tool) for tool in page.tools)
                if len(tools) > MAX_LISTED_TOOLS:
                    message = (
                        f"MCP server '{server.label}' lists more than {MAX_LISTED_TOOLS} tools"
                    )
                    raise ToolFailure(message)
                cursor = page.next_cursor
                if not cursor:
                    return tools
            raise ToolFailure(
                f"MCP server '{server.label}' listed more than {MAX_TOOL_PAGES} pages of tools"
            )

        return await self._run(server, every_page)

    async def call_tool(self, server: McpServer, name: str, arguments: Mapping[str, Any]) -> str:
        request = types.CallToolRequest(
            params=types.CallToolRequestParams(name=name, arguments=dict(arguments))
        )

        async def call(session: ClientSession) -> str:
            # Not ``session.call_tool``: that re-lists the server's tools (first page only)
            # before any call of a tool this session has not listed, to check structured
            # output against its schema; the model reads text, so the check buys nothing.
            try:
                result = await session.send_request(request, CALL_RESULT)
            except ValidationError as refused:
                if not input_required(refused):
                    raise
                raise _asked_for_input(server, name) from None
            if isinstance(result, types.InputRequiredResult):
                raise _asked_for_input(server, name)
            return checked_text(result)

        return await self._run(server, call)

    async def aclose(self) -> None:
        """Close every session: handshakes in progress are abandoned, open sessions say
        goodbye (bounded by ``close_timeout``), and every owner task has ended on return."""
        self._closed = True
        entries = list(self._live)
        for entry in entries:
            entry.stop()
        await asyncio.gather(*(entry.task for entry in entries), return_exceptions=True)

    async def _run(
        self, server: McpServer, operation: Callable[[ClientSession], Awaitable[T]]
    ) -> T:
        """``operation`` on the key's session, its failures as :class:`ToolFailure`."""
        for attempt in range(MAX_ATTEMPTS):
            entry = self._checkout(server)
            mark = entry.trace.serial
            try:
                session = await entry.session()
                if session is None:
                    continue  # retired while we waited (failed its check): take a new one
                with entry.notifications.bounded():
                    return await operation(session)
            except NotificationFlood as flood:
                raise failures.flooded(flood.limit).for_server(server) from None
            except ToolFailure as reported:  # a tool's isError result, as the server wrote it
                raise failures.masked(reported, server) from None
            except asyncio.CancelledError:
                entry.suspect()
                raise
            except Exception as exc:  # noqa: BLE001 - the one boundary translating SDK errors
                http = entry.trace.since(mark)
                failure = failures.classify(exc, http)
                if failure.retires_session:
                    entry.retire()
                if http is not None and http.session_gone and attempt < MAX_ATTEMPTS - 1:
                    continue
                raise failure.for_server(server) from None
            finally:
                entry.leave()
        raise failures.CLOSED.for_server(server)

    def _checkout(self, server: McpServer) -> PooledSession:
        """The key's usable session, created (and starting its handshake) when there is none.
        Synchronous, so concurrent first users of a key all get the same one."""
        if self._closed:
            message = f"MCP server '{server.label}' is not available: the client is closed"
            raise ToolFailure(ToolError.protocol(types.CONNECTION_CLOSED, message))
        entry = self._current.get(server.pool_key)
        if entry is None or entry.expired():
            if entry is not None:
                entry.retire()
            self._make_room()
            entry = PooledSession(
                server,
                ttl=self._ttl,
                connect_timeout=self._connect_timeout,
                max_event_bytes=self._max_event_bytes,
                close_timeout=self._close_timeout,
                clock=self._clock,
                on_ready=self._initialized,
                on_end=self._ended,
                max_notifications=self._max_notifications,
            )
            self._current[server.pool_key] = entry
            self._live.add(entry)
        entry.enter()
        return entry

    def _make_room(self) -> None:
        """Retire the least recently used idle sessions until one more fits under
        ``max_sessions`` (busy ones are left alone: they end with their calls)."""
        excess = len(self._current) - self._max_sessions + 1
        if excess <= 0:
            return
        idle = sorted(
            (e for e in self._current.values() if e.in_flight == 0), key=lambda e: e.last_used
        )
        for entry in idle[:excess]:
            entry.retire()
            del self._current[entry.server.pool_key]

    def _initialized(self, entry: PooledSession) -> None:
        self.initializations += 1

    def _ended(self, entry: PooledSession) -> None:
        self._live.discard(entry)
        if self._current.get(entry.server.pool_key) is entry:
            del self._current[entry.server.pool_key]
