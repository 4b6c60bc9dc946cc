"""The table in :mod:`stateway.mcp_client.failures`, row by row: what went wrong talking to an
MCP server, the failure it becomes, and whether the session survives it. In memory: the
exceptions the SDK and its HTTP client raise, built here (classified in an event loop,
as the pool does: the cancellation class is the running loop's)."""

from __future__ import annotations

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from stateway.mcp_client.failures import (
    CLOSED,
    NO_ANSWER,
    NOT_MCP,
    UNREACHABLE,
    Failure,
    classify,
    from_http,
)
from stateway.mcp_client.transports import HttpEvent


def not_mcp() -> ValidationError:
    try:
        types.Tool.model_validate({"name": 3})
    except ValidationError as exc:
        return exc
    raise AssertionError("a tool without a schema was valid")


def answered(status: int, content_type: str = "text/html") -> HttpEvent:
    return HttpEvent(1, status, content_type, session_gone=False)


@pytest.mark.parametrize(
    ("exc", "failure"),
    [
        (MCPError(types.REQUEST_TIMEOUT, "Timed out while waiting"), NO_ANSWER),
        (MCPError(types.CONNECTION_CLOSED, "Connection closed"), CLOSED),
        (MCPError(types.PARSE_ERROR, "Parse error"), NOT_MCP),
        (httpx2.ReadTimeout("read"), NO_ANSWER),
        (TimeoutError(), NO_ANSWER),
        (httpx2.ConnectError("refused"), UNREACHABLE),
        (ConnectionRefusedError(), UNREACHABLE),
        (httpx2.RemoteProtocolError("peer closed"), CLOSED),
        (httpx2.ReadError("reset"), CLOSED),
        (httpx2.StreamClosed(), CLOSED),
        (anyio.ClosedResourceError(), CLOSED),
        (anyio.EndOfStream(), CLOSED),
        (httpx2.DecodingError("gzip"), NOT_MCP),
        (not_mcp(), NOT_MCP),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else "",
)
async def test_what_the_transport_raises(exc: Exception, failure: Failure) -> None:
    assert classify(exc, None) == failure
    assert classify(ExceptionGroup("task group", [exc]), None) == failure


async def test_an_error_the_server_answered_keeps_the_session() -> None:
    error = MCPError(types.INVALID_PARAMS, "b is required")
    kept = Failure("returned an error: b is required", False, "protocol", types.INVALID_PARAMS)
    assert classify(error, None) == kept
    assert classify(error, answered(503)) == kept, "the server's own answer, whatever came before"


async def test_a_stand_in_error_after_a_non_mcp_answer_is_that_answer() -> None:
    closed = MCPError(types.CONNECTION_CLOSED, "Connection closed")
    assert classify(closed, answered(503)) == Failure("answered HTTP 503", True, "http", 503)


@pytest.mark.parametrize(
    ("event", "failure"),
    [
        (answered(400), Failure("answered HTTP 400", True, "http", 400)),
        (answered(401), Failure("refused the credentials (HTTP 401)", True, "http", 401)),
        (answered(200), Failure("answered text/html, not MCP", True, "protocol", -32700)),
        (answered(200, ""), Failure("answered no content type, not MCP", True, "protocol", -32700)),
    ],
    ids=["400", "401", "html", "no-type"],
)
def test_what_an_http_answer_that_is_not_mcp_becomes(event: HttpEvent, failure: Failure) -> None:
    assert from_http(event) == failure
