"""One pooled MCP session and the task that owns it.

The SDK's transports and ``ClientSession`` are anyio context managers whose task groups
must be entered and exited by the same task. A caller's task cannot own them (it may be
cancelled by its timeout, and it ends with the call), so each session has an *owner task*
that enters the transport and the session, runs the ``initialize`` handshake, publishes
the session on a future and then waits: until told to stop, until it has been idle past
the TTL, or until it is retired (broken) and its last call has returned. Callers use the
published ``ClientSession`` from their own tasks; MCP multiplexes their requests.

The owner's whole life runs in one anyio cancel scope, so deadlines keep LIFO order with
the SDK's own scopes: the handshake deadline (``connect_timeout``) is lifted once the
session is ready and a closing deadline (``close_timeout``) bounds the goodbye (the
Streamable HTTP ``DELETE``).

After a cancelled call (the caller's timeout) the session is *suspect*: the SDK sends the
server a cancellation, which a hung server can leave stuck in the transport. The owner
then pings the server (bounded by ``connect_timeout``); callers wait for that verdict, and
a session that does not answer is retired rather than handed out again.

A server sending more than ``max_notifications`` messages that are no replies during one
call (:mod:`.notifications`) has that call fail and its session retired: once its calls
are over, the session is closed, and the flood with it.

A Streamable HTTP server whose ``initialize`` POST is answered 404 or 405 is tried again
over SSE (a GET on the same URL), within the same handshake deadline: a request's
``server_url`` does not say which transport its server speaks, and the MCP specification's
backwards compatibility has clients fall back so (hosted APIs take both).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import replace

import anyio
import mcp_types as types
from mcp import ClientSession

from stateway.core.tools.ports import McpServer
from stateway.mcp_client import failures
from stateway.mcp_client.failures import Failure
from stateway.mcp_client.notifications import MAX_CALL_NOTIFICATIONS, Notifications, counted
from stateway.mcp_client.transports import HttpTrace, open_transport

CLIENT_INFO = types.Implementation(name="stateway", version="0.1.0")

NOT_STREAMABLE_HTTP = frozenset({404, 405})
"""Answers to the Streamable HTTP ``initialize`` POST that send the client to SSE."""


class PooledSession:
    """A pooled session; the pool checks calls in and out with :meth:`enter`/:meth:`leave`."""

    def __init__(
        self,
        server: McpServer,
        *,
        ttl: float,
        connect_timeout: float,
        max_event_bytes: int,
        close_timeout: float,
        clock: Callable[[], float],
        on_ready: Callable[[PooledSession], None],
        on_end: Callable[[PooledSession], None],
        max_notifications: int = MAX_CALL_NOTIFICATIONS,
    ) -> None:
        self.server = server
        self.in_flight = 0
        self.retired = False
        """No new calls: the owner closes the session once ``in_flight`` is zero."""
        self.trace = HttpTrace(on_event=self.retire, max_body_bytes=max_event_bytes)
        self.notifications = Notifications(max_notifications, on_flood=self.retire)
        """What the server sent that is no reply; a call past its bound retires the session."""
        self._ttl = ttl
        self._connect_timeout = connect_timeout
        self._max_event_bytes = max_event_bytes
        self._close_timeout = close_timeout
        self._clock = clock
        self._on_ready = on_ready
        self._on_end = on_end
        self.last_used = clock()
        loop = asyncio.get_running_loop()
        self._ready: asyncio.Future[ClientSession] = loop.create_future()
        self._ready.add_done_callback(_retrieve)
        self._healthy = asyncio.Event()
        self._healthy.set()
        self._wake = asyncio.Event()
        self._stopping = False
        self._scope: anyio.CancelScope | None = None
        self._mark = 0
        """The trace's serial when the transport in use was opened (its answers follow)."""
        self.task = asyncio.create_task(self._own(), name=f"mcp session {server.label}")

    # -- used by the pool (caller tasks) -----------------------------------------------

    def expired(self) -> bool:
        """Retired, or idle past the TTL (the owner may not have noticed yet)."""
        idle = self.in_flight == 0 and self._clock() - self.last_used >= self._ttl
        return self.retired or idle

    def enter(self) -> None:
        self.in_flight += 1
        self.last_used = self._clock()

    def leave(self) -> None:
        self.in_flight -= 1
        self.last_used = self._clock()
        self._wake.set()

    async def session(self) -> ClientSession | None:
        """The initialized session once the handshake is done (and a suspect session has
        passed its check); None when it was retired meanwhile. Raises :class:`ToolFailure`
        when the handshake failed. A caller's cancellation leaves both running."""
        session = await asyncio.shield(self._ready)
        await self._healthy.wait()
        return None if self.retired else session

    def retire(self) -> None:
        self.retired = True
        self._wake.set()

    def suspect(self) -> None:
        """A call was cancelled mid-flight: check the session before handing it out again."""
        if self._ready.done() and not self.retired:
            self._healthy.clear()
            self._wake.set()

    def stop(self) -> None:
        """Close now (the pool is closing): abandon a handshake, end the session."""
        self._stopping = True
        self.retire()
        if self._scope is not None:
            if not self._ready.done():
                self._scope.cancel()
            else:
                self._scope.deadline = min(
                    self._scope.deadline, anyio.current_time() + self._close_timeout
                )

    # -- the owner task ----------------------------------------------------------------

    async def _own(self) -> None:
        failure: Failure | None = None
        try:
            if self._stopping:
                return
            with anyio.CancelScope(deadline=anyio.current_time() + self._connect_timeout) as scope:
                self._scope = scope
                try:
                    await self._run(self.server, scope)
                except Exception:
                    if not self._falls_back():
                        raise
                    self.retired = False  # the refused POST retired it (:class:`HttpTrace`)
                    self._mark = self.trace.serial
                    await self._run(replace(self.server, transport="sse"), scope)
            if scope.cancelled_caught and not self._ready.done():
                failure = self._unfinished_handshake()
        except Exception as exc:  # noqa: BLE001 - the owner is the boundary: any transport error ends the session
            failure = failures.classify(exc, self.trace.since(self._mark))
        finally:
            self.retired = True
            self._healthy.set()
            if not self._ready.done():
                self._ready.set_exception((failure or failures.CLOSED).for_server(self.server))
            self._on_end(self)

    async def _run(self, server: McpServer, scope: anyio.CancelScope) -> None:
        """Open the transport ``server`` names, run the handshake and serve the session
        until it ends."""
        async with (
            open_transport(
                server, self.trace, self._connect_timeout, self._max_event_bytes
            ) as streams,
            ClientSession(
                *counted(streams, self.notifications), client_info=CLIENT_INFO
            ) as session,
        ):
            await session.initialize()
            scope.deadline = math.inf
            self._ready.set_result(session)
            self._on_ready(self)
            await self._serve(session)
            scope.deadline = min(scope.deadline, anyio.current_time() + self._close_timeout)

    def _falls_back(self) -> bool:
        """Whether a failed handshake over Streamable HTTP is tried again over SSE."""
        http = self.trace.since(self._mark)
        return (
            self.server.transport == "streamable_http"
            and not self._ready.done()
            and not self._stopping
            and http is not None
            and http.status in NOT_STREAMABLE_HTTP
        )

    def _unfinished_handshake(self) -> Failure:
        if self._stopping:
            return failures.CLOSED
        http = self.trace.since(self._mark)  # the SSE transport never answers a POST that failed
        return (
            failures.from_http(http) if http else failures.handshake_timeout(self._connect_timeout)
        )

    async def _serve(self, session: ClientSession) -> None:
        """Wait until stopped, retired and quiet, or idle past the TTL; check suspect sessions."""
        while not self._stopping:
            if not self._healthy.is_set():
                await self._check(session)
                continue
            timeout: float | None = None
            if self.in_flight == 0:
                if self.retired:
                    return
                idle = self._clock() - self.last_used
                if idle >= self._ttl:
                    self.retired = True
                    return
                timeout = self._ttl - idle
            self._wake.clear()
            with anyio.move_on_after(math.inf if timeout is None else timeout):
                await self._wake.wait()

    async def _check(self, session: ClientSession) -> None:
        try:
            with anyio.fail_after(self._connect_timeout):
                await session.send_ping()
        except Exception:  # noqa: BLE001 - any failure of the ping means the session is unusable
            self.retired = True
        finally:
            self._healthy.set()


def _retrieve(future: asyncio.Future[ClientSession]) -> None:
    """Mark a failed handshake's exception as seen when no caller is waiting any more."""
    if not future.cancelled():
        future.exception()
