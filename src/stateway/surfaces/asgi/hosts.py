"""The ``Host`` header check that stops DNS rebinding.

A web page on ``evil.example`` whose name is re-pointed at 127.0.0.1 can reach a
loopback gateway, but its requests still carry ``Host: evil.example``; refusing host
names the gateway was not told to answer to stops it before any route runs.

Starlette's ``TrustedHostMiddleware`` answers in plain text and reads ``[::1]:8080`` as
host ``[``; this one compares without the port, case-insensitively, keeps IPv6 literals
in brackets and answers in the OpenAI error shape (HTTP 421).

Browsers apply no CORS to WebSockets: a page on any site may open one to a loopback
gateway and, without auth, use it. :func:`cross_site` tells an upgrade whose ``Origin``
is not the gateway's own (the ``Host`` it was sent to); clients other than browsers send
no ``Origin``.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from stateway.core.errors import InvalidRequest
from stateway.surfaces.asgi.answers import error_response


def host_name(header: str) -> str:
    """``Host`` without its port, lower-cased: ``[::1]:8080`` -> ``[::1]``."""
    if header.startswith("["):
        end = header.find("]")
        return header[: end + 1].lower() if end > 0 else header.lower()
    return header.partition(":")[0].lower()


def cross_site(scope: Scope) -> bool:
    """Whether a request carries an ``Origin`` other than the host it was sent to."""
    origin = host = None
    for name, value in scope["headers"]:
        if name == b"origin":
            origin = value.decode("latin-1")
        elif name == b"host":
            host = value.decode("latin-1")
    if origin is None:
        return False
    try:
        netloc = urlsplit(origin).netloc
    except ValueError:
        return True
    return host is None or netloc.lower() != host.lower()


class HostGuard:
    """Pure ASGI middleware: requests (and WebSocket upgrades) whose ``Host`` is not in
    ``allowed`` are refused with 421; others pass with one header scan."""

    def __init__(self, app: ASGIApp, allowed: Iterable[str]) -> None:
        self.app = app
        self.allowed = frozenset(name.lower() for name in allowed)

    def passes(self, scope: Scope) -> bool:
        """Whether the request's ``Host`` is served: it passes untouched (what an express
        route asks first, :mod:`stateway.surfaces.http.express`)."""
        return host_name(_host(scope)) in self.allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        header = _host(scope)
        if host_name(header) in self.allowed:
            await self.app(scope, receive, send)
            return
        error = InvalidRequest(
            f"The host name {header!r} is not served here; see the allowed_hosts setting.",
            code="host_not_allowed",
            status=421,
        )
        if scope["type"] == "http" or "websocket.http.response" in scope.get("extensions", {}):
            await error_response(error)(scope, receive, send)
        else:
            await send({"type": "websocket.close", "code": 1008, "reason": error.message})


def _host(scope: Scope) -> str:
    """The request's ``Host`` header (empty when it sent none)."""
    for name, value in scope["headers"]:
        if name == b"host":
            return str(value.decode("latin-1"))
    return ""
