"""The one place where what went wrong talking to an MCP server becomes a
:class:`ToolFailure`: a short message naming the server's label, never a traceback, a URL's
credentials or a header value (nor, in a tool's ``isError`` result, a header value it
echoed: :func:`masked`), and the kind of error a failed ``mcp_call`` shows
(``ToolError``): what the server answered when it answered (its HTTP error status, its
JSON-RPC error code), else the JSON-RPC code MCP SDKs stand in with (``-32000`` closed,
``-32001`` timed out, ``-32700`` not readable), and HTTP 502 for a server that could not be
reached at all (what a proxy answers).

Each failure also says whether the session it happened on may be used again. Only an
error the server itself answered in JSON-RPC (a tool it does not know, bad arguments) leaves
the session healthy; anything from the transport, an HTTP error, a reply that is not MCP or
a closed stream retires it, and the next call opens a new one.

================================  ======================================  ==========  =======
what happened                     message (after ``MCP server 'label'``)  error       session
================================  ======================================  ==========  =======
connection refused, DNS, TLS      ``is unreachable``                      http 502    retired
no answer in time (HTTP client)   ``did not answer in time``              -32001      retired
no handshake in time              ``did not complete the MCP handshake``  -32001      retired
HTTP 401 / 403                    ``refused the credentials (HTTP 401)``  http 401    retired
other HTTP error status           ``answered HTTP 503``                   http 503    retired
200 with another content type     ``answered text/html, not MCP``         -32700      retired
unparseable or non-JSON-RPC body  ``sent a reply that is not MCP``        -32700      retired
JSON reply past the event limit   ``sent a reply larger than the gateway``  -32700      retired
too many notifications in a call  ``sent more than N notifications ...``  -32603      retired
stream closed, transport ended    ``closed the connection``               -32000      retired
JSON-RPC error from the server    ``returned an error: <its message>``    its code    kept
a tool asking for input first     ``tool 'x' asked for input, ...``       -32021      kept
anything else                     ``failed (<exception type>)``           -32603      retired
================================  ======================================  ==========  =======

(-32xxx: an ``mcp_protocol_error`` with that code; http: an ``http_error`` with that status.
A tool asking for input is told by the call itself, :mod:`.pool`, which knows the tool.)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from stateway.core.tools.ports import McpServer, ToolError, ToolErrorKind, ToolFailure
from stateway.mcp_client.transports import HttpEvent
from stateway.redaction import RUN, KeyScrubber

log = logging.getLogger(__name__)

MAX_SERVER_MESSAGE = 300
"""Characters of a server's own error message passed on."""

_TRANSPORT_CODES = frozenset({types.CONNECTION_CLOSED, types.REQUEST_TIMEOUT, types.PARSE_ERROR})
"""JSON-RPC codes the SDK's transports make up themselves (the server sent none of them)."""


UNREACHABLE_STATUS = 502
"""The ``http_error`` status of a server that could not be reached (no HTTP answer at all):
what a proxy answers when its upstream cannot be reached."""


@dataclass(frozen=True, slots=True)
class Failure:
    message: str
    """Without the ``MCP server 'label'`` prefix."""
    retires_session: bool
    kind: ToolErrorKind
    code: int
    """The JSON-RPC code (``protocol``) or the HTTP status (``http``)."""

    def for_server(self, server: McpServer) -> ToolFailure:
        """The failure as ``server``'s, any of its header values the server's own message
        echoed (a credential, whole or in part, in any case) masked."""
        message = f"MCP server '{server.label}' {self.message}"
        return masked(ToolFailure(ToolError(message, self.kind, self.code)), server)


def masked(failure: ToolFailure, server: McpServer) -> ToolFailure:
    """``failure`` with every stretch of ``server``'s header values in its message, and in
    the strings of its content (an ``isError`` result's blocks, as the server sent them),
    masked: a server may echo the request's headers in any error it answers. Only values
    of :data:`~stateway.redaction.RUN` characters or more: a shorter one (a version, a
    flag) is no credential, and masking it would blot each of its characters out of the
    text the model reads."""
    scrubbers = [KeyScrubber(value) for _, value in server.headers if len(value) >= RUN]
    if not scrubbers:
        return failure

    def scrub(value: Any) -> Any:
        match value:
            case str():
                for scrubber in scrubbers:
                    value = scrubber(value)
                return value
            case list():
                return [scrub(inner) for inner in value]
            case dict():
                return {key: scrub(inner) for key, inner in value.items()}
        return value

    error = failure.error
    return ToolFailure(replace(error, message=scrub(error.message), content=scrub(error.content)))


def _retiring(message: str, code: int, kind: ToolErrorKind = "protocol") -> Failure:
    return Failure(message, retires_session=True, kind=kind, code=code)


UNREACHABLE = _retiring("is unreachable", UNREACHABLE_STATUS, "http")
NO_ANSWER = _retiring("did not answer in time", types.REQUEST_TIMEOUT)
CLOSED = _retiring("closed the connection", types.CONNECTION_CLOSED)
NOT_MCP = _retiring("sent a reply that is not MCP", types.PARSE_ERROR)


def handshake_timeout(seconds: float) -> Failure:
    return _retiring(
        f"did not complete the MCP handshake within {seconds:g} s", types.REQUEST_TIMEOUT
    )


def flooded(limit: int) -> Failure:
    """More than ``limit`` notifications during one call (:mod:`.notifications`)."""
    return _retiring(f"sent more than {limit} notifications during one call", types.INTERNAL_ERROR)


def from_http(event: HttpEvent) -> Failure:
    if event.oversized:
        return _retiring("sent a reply larger than the gateway reads", types.PARSE_ERROR)
    if event.status in (401, 403):
        return _retiring(f"refused the credentials (HTTP {event.status})", event.status, "http")
    if event.status >= 400:
        return _retiring(f"answered HTTP {event.status}", event.status, "http")
    shown = event.content_type or "no content type"
    return _retiring(f"answered {shown}, not MCP", types.PARSE_ERROR)


def classify(exc: Exception, http: HttpEvent | None) -> Failure:
    """The failure ``exc`` stands for; ``http`` is the trace's latest non-MCP answer since
    the operation began (it explains the SDK's stand-in errors)."""
    leaf = _significant(exc)
    if http is not None and not _answered_by_server(leaf):
        return from_http(http)
    match leaf:
        case MCPError() if leaf.code == types.CONNECTION_CLOSED:
            return CLOSED
        case MCPError() if leaf.code == types.REQUEST_TIMEOUT:
            return NO_ANSWER
        case MCPError() if leaf.code == types.PARSE_ERROR:
            return NOT_MCP
        case MCPError():
            text = leaf.message[:MAX_SERVER_MESSAGE] or f"code {leaf.code}"
            return Failure(
                f"returned an error: {text}", retires_session=False, kind="protocol", code=leaf.code
            )
        case httpx2.HTTPStatusError():
            return from_http(HttpEvent(0, leaf.response.status_code, "", session_gone=False))
        case httpx2.TimeoutException() | TimeoutError():
            return NO_ANSWER
        case httpx2.ConnectError() | httpx2.UnsupportedProtocol() | OSError():
            return UNREACHABLE
        case httpx2.TransportError() | httpx2.StreamError():
            return CLOSED
        case anyio.ClosedResourceError() | anyio.BrokenResourceError() | anyio.EndOfStream():
            return CLOSED
        case ValidationError() | httpx2.DecodingError():
            return NOT_MCP
    log.warning("an MCP call failed unexpectedly: %r", leaf)
    return _retiring("failed unexpectedly", types.INTERNAL_ERROR)


def _answered_by_server(exc: BaseException) -> bool:
    """A JSON-RPC error the server sent (not one the transport made up)."""
    return (
        isinstance(exc, MCPError)
        and exc.code not in _TRANSPORT_CODES
        and exc.code
        not in (
            types.INTERNAL_ERROR,
            types.INVALID_REQUEST,
            types.METHOD_NOT_FOUND,
        )
    )


def _significant(exc: Exception) -> Exception:
    """The first failure inside ``exc`` (task groups wrap what really failed). An
    ``Exception``'s group holds only ``Exception``s: never the loop's cancellation."""
    while isinstance(exc, ExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
