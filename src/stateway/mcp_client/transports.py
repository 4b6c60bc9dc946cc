"""Opening one MCP transport (Streamable HTTP or SSE) for a server, with its headers on
every request and an :class:`HttpTrace` watching what the HTTP layer answered.

The SDK's transports turn HTTP trouble into JSON-RPC error stand-ins (a 401 and a 500
both read as ``INTERNAL_ERROR``, a 404 as ``Session terminated``) or into bare transport
exceptions. The trace is an ``httpx2`` response hook on the session's own client, so the
error mapping (:mod:`stateway.mcp_client.failures`) can name the status the server really
answered, and the pool can tell a session the server forgot (404 on a request carrying the
session id) from a tool that failed. The same hook caps a JSON answer's body (the SDK
reads one whole, with no limit): its bytes are counted as they arrive, and one compressed
although the client asked for none is not read at all.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from functools import cache

import httpx2
from mcp.client._transport import TransportStreams
from mcp.client.sse import sse_client
from mcp.client.streamable_http import MCP_SESSION_ID, streamable_http_client

from stateway.core.tools.ports import McpServer, McpTransport
from stateway.mcp_session_logs import mask_session_ids

STREAM_READ_TIMEOUT = 300.0
"""Seconds a response stream may stay silent (a long tool call answers on it)."""

MIN_EVENT_BYTES = 1024 * 1024
"""The SDK's own limit on one SSE event: the least :func:`event_limit` gives."""

_MCP_CONTENT_TYPES = ("application/json", "text/event-stream")

IDENTITY = {"Accept-Encoding": "identity"}
"""Asked of every server, whatever a server's configured headers say: answers as they are,
so that a JSON body's limit counts what it holds (``httpx2`` would otherwise offer gzip
and inflate what came, at any ratio)."""


@dataclass(frozen=True, slots=True)
class HttpEvent:
    """One answer that was not MCP: an HTTP error status or a foreign content type."""

    serial: int
    status: int
    content_type: str
    session_gone: bool
    """A 404 to a request carrying the session id: the server no longer knows the session."""
    oversized: bool = False
    """A JSON answer longer than the session takes: abandoned unread (:class:`_CappedBody`)."""


class HttpTrace:
    """What one session's HTTP requests were answered with, when it was not MCP.
    ``on_event`` runs at each such answer (the session retires itself: the SSE transport
    drops a failed POST's request without answering it, and stops sending after it)."""

    def __init__(
        self, on_event: Callable[[], None] = lambda: None, max_body_bytes: int = MIN_EVENT_BYTES
    ) -> None:
        self.serial = 0
        self.max_body_bytes = max_body_bytes
        """The longest JSON answer to a POST taken (:func:`event_limit`)."""
        self._last: HttpEvent | None = None
        self._on_event = on_event

    def since(self, serial: int) -> HttpEvent | None:
        """The latest non-MCP answer after mark ``serial`` (taken with :attr:`serial`)."""
        last = self._last
        return last if last is not None and last.serial > serial else None

    async def observe(self, response: httpx2.Response) -> None:
        """Records answers to POSTs (the requests calls send), not to the transport's own
        GET stream or goodbye."""
        if response.request.method != "POST":
            return
        content_type = response.headers.get("content-type", "").partition(";")[0].strip().lower()
        if content_type == "application/json":
            encoding = response.headers.get("content-encoding", "identity").strip().lower()
            if encoding != "identity":
                # Asked for none (:data:`IDENTITY`): a compressed body could inflate to
                # any size past the count of its bytes, so it is not read.
                response.stream = _CappedBody(response.stream, -1, lambda: None)
                self.record(response, f"{content_type} ({encoding})")
                return
            response.stream = _CappedBody(
                response.stream,
                self.max_body_bytes,
                lambda: self.record(response, content_type, oversized=True),
            )
        foreign = response.status_code == 200 and content_type not in _MCP_CONTENT_TYPES
        if response.status_code < 400 and not foreign:
            return
        self.record(response, content_type)

    def record(self, response: httpx2.Response, content_type: str, oversized: bool = False) -> None:
        """Note a non-MCP answer (``oversized``: a JSON one too long to read)."""
        self.serial += 1
        self._last = HttpEvent(
            serial=self.serial,
            status=response.status_code,
            content_type=content_type,
            session_gone=response.status_code == 404 and MCP_SESSION_ID in response.request.headers,
            oversized=oversized,
        )
        self._on_event()


class BodyTooLarge(httpx2.StreamError):
    """A JSON answer not read: longer than the trace's ``max_body_bytes``, or compressed.
    The SDK reads such an answer whole (``response.aread()``, no limit of its own), so a
    server could make the gateway hold any amount of memory with one reply."""


class _CappedBody(httpx2.AsyncByteStream):
    """A POST's JSON body, failing with :class:`BodyTooLarge` (the SDK's transport hands
    the caller a parse error, the trace names the cause) once longer than ``limit`` bytes
    (-1: at its first byte). Counts the bytes as they arrive (a ``Content-Length`` may be
    absent or false); ``on_overflow`` runs first."""

    def __init__(
        self,
        inner: httpx2.SyncByteStream | httpx2.AsyncByteStream,
        limit: int,
        on_overflow: Callable[[], None],
    ) -> None:
        self._inner = inner
        self._limit = limit
        self._on_overflow = on_overflow

    async def __aiter__(self) -> AsyncIterator[bytes]:
        assert isinstance(self._inner, httpx2.AsyncByteStream)
        size = 0
        async for chunk in self._inner:
            size += len(chunk)
            if size > self._limit:
                self._on_overflow()
                raise BodyTooLarge(f"longer than {self._limit} bytes")
            yield chunk

    async def aclose(self) -> None:
        assert isinstance(self._inner, httpx2.AsyncByteStream)
        await self._inner.aclose()


@cache
def _tls_context() -> ssl.SSLContext:
    """The TLS context every session's client verifies servers with, built once.

    Left to itself, each ``httpx2.AsyncClient`` builds its own and loads the system's CA
    certificates into it (~0.9 MB of OpenSSL memory and a few milliseconds, for an
    ``http://`` server too): with a session per ``(tenant, url, transport, headers)``, the
    pool's ``max_sessions`` (256) held ~230 MB of copies of the same certificates. A
    context is safe to share between connections; this is the one the client would build
    (``SSL_CERT_FILE`` and ``SSL_CERT_DIR`` are honoured, read at first use)."""
    return httpx2.create_ssl_context()


def _identity(headers: dict[str, str] | None) -> dict[str, str]:
    """``headers`` asking for uncompressed answers (:data:`IDENTITY`), in place of any
    ``Accept-Encoding`` of their own."""
    kept = {
        name: value for name, value in (headers or {}).items() if name.lower() != "accept-encoding"
    }
    return kept | IDENTITY


def _http_client(
    headers: dict[str, str] | None, timeout: httpx2.Timeout | None, trace: HttpTrace
) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(
        headers=_identity(headers),
        timeout=timeout,
        verify=_tls_context(),
        event_hooks={"response": [trace.observe]},
    )


def event_limit(max_output_bytes: int) -> int:
    """The largest SSE event a session takes when calls may return ``max_output_bytes`` of
    output. A result arrives as one event holding its text JSON-escaped, often twice (the
    ``mcp`` SDK's ``MCPServer`` repeats a tool's returned text as ``structuredContent``):
    room for four times the output, so that the loop's own check of the output's size
    decides (and says so), not the transport failing the call as a closed connection."""
    return max(MIN_EVENT_BYTES, 4 * max_output_bytes + 64 * 1024)


@asynccontextmanager
async def _streamable_http(
    server: McpServer, trace: HttpTrace, connect_timeout: float, max_event_bytes: int
) -> AsyncIterator[TransportStreams]:
    mask_session_ids()  # the SDK's client logs the session id a server gives it
    timeout = httpx2.Timeout(connect_timeout, read=STREAM_READ_TIMEOUT)
    async with (
        _http_client(dict(server.headers), timeout, trace) as client,
        streamable_http_client(
            server.url, http_client=client, max_sse_event_size=max_event_bytes
        ) as streams,
    ):
        yield streams


@asynccontextmanager
async def _sse(
    server: McpServer, trace: HttpTrace, connect_timeout: float, max_event_bytes: int
) -> AsyncIterator[TransportStreams]:
    """The SDK's SSE transport keeps its own 1 MiB per event (``max_event_bytes`` cannot
    reach it)."""

    def client_factory(
        headers: dict[str, str] | None = None,
        timeout: httpx2.Timeout | None = None,
        auth: httpx2.Auth | None = None,
    ) -> httpx2.AsyncClient:
        return _http_client(headers, timeout, trace)

    async with sse_client(
        server.url,
        headers=dict(server.headers),
        timeout=connect_timeout,
        sse_read_timeout=STREAM_READ_TIMEOUT,
        httpx_client_factory=client_factory,
    ) as streams:
        yield streams


Opener = Callable[[McpServer, HttpTrace, float, int], AbstractAsyncContextManager[TransportStreams]]

OPENERS: dict[McpTransport, Opener] = {"streamable_http": _streamable_http, "sse": _sse}
"""How each transport a server may name is opened."""


def open_transport(
    server: McpServer, trace: HttpTrace, connect_timeout: float, max_event_bytes: int
) -> AbstractAsyncContextManager[TransportStreams]:
    """The transport's context manager: enter and exit it in the same task.
    ``max_event_bytes``: the largest SSE event taken (:func:`event_limit`)."""
    return OPENERS[server.transport](server, trace, connect_timeout, max_event_bytes)
