"""The ``Host`` header check that stops DNS rebinding.

A web page on ``evil.example`` whose name is re-pointed at 127.0.0.1 can reach a
loopback gateway, but its requests still carry ``Host: evil.example``; refusing host
names the gateway was not told to answer to stops it before any route runs.

Starlette's ``TrustedHostMiddleware`` answers in plain text and reads ``[::1]:8080`` as
host ``[``; this one compares without the port, case-insensitively, keeps IPv6 literals
in brackets and answers in the OpenAI error shape (HTTP 421). As Starlette's, an entry
``*.example.com`` serves every subdomain of ``example.com`` (not ``example.com`` itself),
and (as Django's) a fully qualified name's final dot (``gw.example.com.``) is no other
name.

Browsers apply no CORS to WebSockets: a page on any site may open one to a loopback
gateway and, without auth, use it. :func:`cross_site` tells an upgrade whose ``Origin``
is not the gateway's own (the ``Host`` it was sent to), nor one the operator listed
(``[server] cors_origins``: the pages allowed to call it from a browser); clients other
than browsers send no ``Origin``.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from stateway.core.errors import InvalidRequest
from stateway.surfaces.asgi.answers import error_response

WILDCARD = "*."
"""How an entry serving every subdomain of a domain begins: ``*.example.com``."""

_SUBDOMAIN = re.compile(r"[a-z0-9_-]+(?:\.[a-z0-9_-]+)*")
"""What a wildcard stands for: one or more whole DNS labels."""


def host_name(header: str) -> str:
    """``Host`` without its port, lower-cased: ``[::1]:8080`` -> ``[::1]``."""
    if header.startswith("["):
        end = header.find("]")
        return header[: end + 1].lower() if end > 0 else header.lower()
    return header.partition(":")[0].lower()


def cross_site(scope: Scope, origins: Collection[str] = ()) -> bool:
    """Whether a request carries an ``Origin`` other than the host it was sent to and not
    among ``origins`` (as :func:`~stateway.server_config.serialized_origin` writes them;
    ``"*"``: any origin)."""
    origin = host = None
    for name, value in scope["headers"]:
        if name == b"origin":
            origin = value.decode("latin-1")
        elif name == b"host":
            host = value.decode("latin-1")
    if origin is None or "*" in origins or origin.lower() in origins:
        return False
    try:
        netloc = urlsplit(origin).netloc
    except ValueError:
        return True
    return host is None or netloc.lower() != host.lower()


class HostGuard:
    """Pure ASGI middleware: requests (and WebSocket upgrades) whose ``Host`` is not
    ``allowed`` are refused with 421; others pass with one header scan. ``allowed``:
    host names as :func:`host_name` gives them, and ``*.domain`` entries."""

    def __init__(self, app: ASGIApp, allowed: Iterable[str]) -> None:
        self.app = app
        names = {_qualified(name.lower()) for name in allowed} - {""}
        self.allowed = frozenset(name for name in names if not name.startswith(WILDCARD))
        self.domains = tuple(name[1:] for name in names if name.startswith(WILDCARD))
        """Each wildcard's domain with its leading dot: ``.example.com``."""

    def passes(self, scope: Scope) -> bool:
        """Whether the request's ``Host`` is served: it passes untouched (what an express
        route asks first, :mod:`stateway.surfaces.http.express`)."""
        return self.serves(_host(scope))

    def serves(self, header: str) -> bool:
        """Whether a ``Host`` header names a host served here."""
        name = _qualified(host_name(header))
        if name in self.allowed:
            return True
        return any(
            name.endswith(domain) and _SUBDOMAIN.fullmatch(name[: -len(domain)]) is not None
            for domain in self.domains
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        header = _host(scope)
        if self.serves(header):
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


def _qualified(name: str) -> str:
    """``name`` without the final dot of a fully qualified name (``gw.example.com.``)."""
    return name.removesuffix(".")


def _host(scope: Scope) -> str:
    """The request's ``Host`` header (empty when it sent none)."""
    for name, value in scope["headers"]:
        if name == b"host":
            return str(value.decode("latin-1"))
    return ""
