"""Servers that cannot be reached, hang, or answer with something that is not MCP: each is a
short :class:`ToolFailure` naming the server, never a traceback or a header value, and the
pool stays usable."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import anyio
import mcp_types as types
import pytest
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from stateway.core.tools.ports import McpServer, McpTransport, ToolError, ToolFailure
from stateway.mcp_client.failures import classify, masked
from stateway.mcp_client.pool import PooledMcpClient
from stateway.redaction import RUN
from tests.support.hostile_mcp_server import serve_huge_results
from tests.support.mcp_server import (
    RunningMcpServer,
    hanging_server,
    serve_app,
    serve_mcp,
    serve_misbehaving,
    unreachable_url,
)

from .test_calls import TRANSPORTS, server_for

SECRET = "Bearer very-secret-token"


def remote(url: str, transport: McpTransport = "streamable_http") -> McpServer:
    return McpServer("docs", url, (("Authorization", SECRET),), transport)


async def error_of(pool: PooledMcpClient, server: McpServer) -> ToolError:
    """The error of a call, checked to be the same for a listing and to leak nothing."""
    with pytest.raises(ToolFailure) as failure:
        await pool.call_tool(server, "add", {"a": 1, "b": 2})
    error = failure.value.error
    assert "very-secret-token" not in error.message
    assert "Traceback" not in error.message
    with pytest.raises(ToolFailure) as listing:
        await pool.list_tools(server)
    assert listing.value.error == error  # the same answer for discovery
    return error


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_unreachable_server(pool: PooledMcpClient, transport: McpTransport) -> None:
    error = await error_of(pool, remote(unreachable_url(), transport))

    assert error == ToolError.http(502, "MCP server 'docs' is unreachable")
    assert pool.open_sessions == 0
    assert pool.initializations == 0


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_hanging_server_is_bounded_by_the_connect_timeout(
    transport: McpTransport,
) -> None:
    pool = PooledMcpClient(connect_timeout=0.3)
    try:
        with hanging_server() as url:
            started = time.monotonic()
            error = await error_of(pool, remote(url, transport))
            elapsed = time.monotonic() - started
        handshake = "MCP server 'docs' did not complete the MCP handshake within 0.3 s"
        assert error == ToolError.protocol(-32001, handshake)
        assert elapsed < 3  # two attempts (call and listing) of 0.3 s each, not 10 s or more
        assert pool.open_sessions == 0
    finally:
        await pool.aclose()


@pytest.mark.parametrize(
    ("status", "content_type", "body", "expected", "code"),
    [
        (200, "application/json", b'{"hello": 1}', "sent a reply that is not MCP", -32700),
        (200, "application/json", b"not json at all", "sent a reply that is not MCP", -32700),
        (200, "text/html", b"<html>hello</html>", "answered text/html, not MCP", -32700),
        (401, "application/json", b'{"error": "no"}', "refused the credentials (HTTP 401)", 401),
        (403, "text/plain", b"forbidden", "refused the credentials (HTTP 403)", 403),
        (404, "text/html", b"not found", "answered HTTP 404", 404),
        (500, "text/plain", b"oops", "answered HTTP 500", 500),
        (503, "application/json", b"{}", "answered HTTP 503", 503),
    ],
)
async def test_a_server_that_does_not_speak_mcp(
    pool: PooledMcpClient, status: int, content_type: str, body: bytes, expected: str, code: int
) -> None:
    with serve_misbehaving(status=status, content_type=content_type, body=body) as url:
        error = await error_of(pool, remote(url))

    assert (error.message, error.code) == (f"MCP server 'docs' {expected}", code)
    assert error.kind == ("http" if status >= 400 else "protocol")
    assert pool.open_sessions == 0


@pytest.mark.parametrize(
    ("status", "expected"),
    [(401, "refused the credentials (HTTP 401)"), (500, "answered HTTP 500")],
)
async def test_an_sse_endpoint_that_does_not_speak_mcp(
    pool: PooledMcpClient, status: int, expected: str
) -> None:
    with serve_misbehaving(status=status, content_type="text/plain", body=b"no") as url:
        error = await error_of(pool, remote(url, "sse"))

    assert error == ToolError.http(status, f"MCP server 'docs' {expected}")


async def test_a_failing_server_does_not_disturb_another(
    mcp_server: RunningMcpServer, pool: PooledMcpClient
) -> None:
    good = server_for(mcp_server)
    bad = remote(unreachable_url())

    results = await asyncio.gather(
        pool.call_tool(good, "add", {"a": 1, "b": 1}),
        pool.call_tool(bad, "add", {"a": 1, "b": 1}),
        return_exceptions=True,
    )

    assert results[0] == "2"
    assert isinstance(results[1], ToolFailure)
    assert pool.initializations == 1


async def test_a_server_that_went_away_fails_the_call_then_recovers_when_back() -> None:
    pool = PooledMcpClient(connect_timeout=2)
    try:
        with serve_mcp(graceful_shutdown=0) as first:
            server = server_for(first, "sse")
            assert await pool.call_tool(server, "add", {"a": 1, "b": 1}) == "2"
            port = first.port
        with pytest.raises(ToolFailure) as failure:
            await pool.call_tool(server, "add", {"a": 1, "b": 1})
        assert failure.value.error in (
            ToolError.protocol(-32000, "MCP server 'test' closed the connection"),
            ToolError.http(502, "MCP server 'test' is unreachable"),
        )
        with serve_mcp(port=port, graceful_shutdown=0):
            assert await pool.call_tool(server, "add", {"a": 2, "b": 2}) == "4"
    finally:
        await pool.aclose()


async def test_an_unforeseen_failure_is_told_without_a_class_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failure = classify(LookupError("session table corrupt"), None)
    assert failure.message == "failed unexpectedly"
    assert (failure.retires_session, failure.code) == (True, types.INTERNAL_ERROR)
    assert "LookupError('session table corrupt')" in caplog.text  # the detail is the operator's


@contextmanager
def redirecting(status: int, location: str) -> Iterator[str]:
    """A URL answering every request with a ``status`` redirect to ``location``."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await Response(status_code=status, headers={"location": location})(scope, receive, send)

    with serve_app(app, lifespan=False) as base_url:
        yield f"{base_url}/mcp"


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_redirect_to_another_origin_is_not_followed(
    mcp_server: RunningMcpServer, pool: PooledMcpClient, status: int, transport: McpTransport
) -> None:
    """An allowed server cannot send the gateway on to a host off the allow-list (a
    metadata endpoint, an internal service): the MCP server there would have answered,
    and hears nothing."""
    elsewhere = server_for(mcp_server, transport).url
    with redirecting(status, elsewhere) as url:
        error = await error_of(pool, remote(url, transport))
    assert error.kind == "protocol"
    assert mcp_server.stats.initializations == 0
    assert pool.initializations == 0


async def test_an_sse_endpoint_on_another_origin_is_not_taken() -> None:
    """An SSE server names the URL its client posts to; one on another origin is refused
    (nothing is sent there), so it cannot steer the gateway off the allow-list."""
    heard: list[str] = []

    async def elsewhere(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            heard.append(f"{scope['method']} {scope['path']}")
            await Response(status_code=202)(scope, receive, send)

    async def naming(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        start = {"type": "http.response.start", "status": 200}
        await send({**start, "headers": [(b"content-type", b"text/event-stream")]})
        event = f"event: endpoint\ndata: {target}/messages/?session_id=0123\n\n".encode()
        await send({"type": "http.response.body", "body": event, "more_body": True})
        await anyio.sleep_forever()

    pool = PooledMcpClient(connect_timeout=0.5)
    try:
        with (
            serve_app(elsewhere, lifespan=False) as target,
            serve_app(naming, lifespan=False, graceful_shutdown=0) as base_url,
        ):
            error = await error_of(pool, remote(f"{base_url}/sse", "sse"))
    finally:
        await pool.aclose()
    assert error.kind == "protocol"
    assert heard == []


def test_only_header_values_long_enough_to_be_credentials_are_masked() -> None:
    """A short header value (a version, a flag) is no secret: masking it would blot every
    ``2`` out of the error text the model reads. A credential's every stretch is masked."""
    server = McpServer(
        "docs",
        "http://mcp.test/mcp",
        (("X-Api-Version", "2"), ("X-Beta", "on"), ("Authorization", SECRET)),
    )
    text = f"version 2 is on, but {SECRET} was refused"
    error = ToolError.execution([{"type": "text", "text": text}], text)
    shown = masked(ToolFailure(error), server).error
    assert shown.message == "version 2 is on, but *** was refused"
    assert shown.content == [{"type": "text", "text": shown.message}]


def test_a_header_value_of_exactly_the_shortest_credential_length_is_masked() -> None:
    key = "k" * RUN
    server = McpServer("docs", "http://mcp.test/mcp", (("X-Key", key),))
    error = ToolError.execution([], f"the key {key} was refused")
    assert masked(ToolFailure(error), server).error.message == "the key *** was refused"


async def test_a_json_reply_past_the_event_limit_is_refused_unread(
    pool: PooledMcpClient,
) -> None:
    """The SDK reads a JSON reply whole: a 64 MiB one (with no ``Content-Length``) is
    abandoned at the session's limit, as a failed call, instead of held in memory; the
    session is retired (its reply was left unread)."""
    with serve_huge_results(mebibytes=64) as url:
        errors = [await error_of(pool, remote(url)) for _ in range(2)]

    message = "MCP server 'docs' sent a reply larger than the gateway reads"
    assert errors == [ToolError.protocol(types.PARSE_ERROR, message)] * 2
    assert pool.initializations == 4  # a new session for every call and listing


async def test_a_compressed_json_reply_is_refused_unread(pool: PooledMcpClient) -> None:
    """The gateway asks for replies as they are (``Accept-Encoding: identity``): a JSON
    reply compressed anyway (64 MiB in under 100 KiB) is not decompressed into
    memory but refused, as a reply that is not MCP."""
    with serve_huge_results(mebibytes=64, gzip=True) as url:
        error = await error_of(pool, remote(url))

    message = "MCP server 'docs' answered application/json (gzip), not MCP"
    assert error == ToolError.protocol(types.PARSE_ERROR, message)


async def test_answers_are_asked_uncompressed_whatever_the_configured_headers_say(
    pool: PooledMcpClient,
) -> None:
    """A server's headers asking for gzip do not undo ``Accept-Encoding: identity``: a
    server compressing only when asked answers as it is, and the call succeeds."""
    server = McpServer("docs", "", (("accept-encoding", "gzip"),))
    with serve_huge_results(mebibytes=0, gzip="accepted") as url:
        assert await pool.call_tool(replace(server, url=url), "add", {}) == ""


@pytest.mark.parametrize(
    ("status", "expected"),
    [(401, "refused the credentials (HTTP 401)"), (500, "answered HTTP 500")],
)
async def test_an_sse_server_refusing_the_handshakes_post_is_told_by_its_status(
    status: int, expected: str
) -> None:
    """The SSE transport leaves a refused POST unanswered, so the handshake runs out its
    deadline: the failure names the status the POST got, not a timeout."""

    async def refusing(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] == "POST":
            await Response(b"no", status_code=status)(scope, receive, send)
            return
        start = {"type": "http.response.start", "status": 200}
        await send({**start, "headers": [(b"content-type", b"text/event-stream")]})
        event = b"event: endpoint\ndata: /messages/?session_id=0123\n\n"
        await send({"type": "http.response.body", "body": event, "more_body": True})
        await anyio.sleep_forever()

    pool = PooledMcpClient(connect_timeout=1.5)  # room for the POST's answer on a busy machine
    try:
        with (
            serve_app(refusing, lifespan=False, graceful_shutdown=0) as base_url,
            pytest.raises(ToolFailure) as failure,
        ):
            await pool.call_tool(remote(f"{base_url}/sse", "sse"), "add", {"a": 1, "b": 2})
    finally:
        await pool.aclose()
    assert failure.value.error == ToolError.http(status, f"MCP server 'docs' {expected}")
