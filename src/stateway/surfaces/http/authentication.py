"""The authentication middleware: every request and WebSocket upgrade is identified
before any route runs (:class:`~stateway.surfaces.auth.authenticator.Authenticator`),
and its :class:`~stateway.surfaces.auth.authenticator.Identity` left in the ASGI scope
for the routes (``principal_of(request.scope)``).

A request that cannot be identified is answered here, in its frontend's error shape:
Anthropic's for ``/v1/messages`` (and a model listing an Anthropic client asks for), the
OpenAI shape elsewhere; 401 for a missing or bad credential, 503 when the identity
provider (or the database holding the keys) cannot say, logged as a route's 5xx is
(:func:`~stateway.surfaces.http.errors.log_answered`). A refused WebSocket upgrade is
denied with that HTTP answer. ``/health`` and ``/ready`` need no credential (probes).
"""

from __future__ import annotations

from typing import Final

from starlette.types import ASGIApp, Receive, Scope, Send

from stateway.core.errors import GatewayError
from stateway.surfaces.auth.authenticator import ANONYMOUS, IDENTITY, Authenticator
from stateway.surfaces.http import messages
from stateway.surfaces.http.errors import log_answered

OPEN_PATHS: Final = frozenset({"/health", "/ready"})


class Authentication:
    """Pure ASGI middleware."""

    def __init__(self, app: ASGIApp, authenticator: Authenticator) -> None:
        self.app = app
        self.authenticator = authenticator

    def passes(self, scope: Scope) -> bool:
        """Whether the request is identified at once, nothing read or awaited (an open
        path; or no auth configured and no admin credential: every caller is the default
        tenant), its identity then left in its scope; else only :meth:`__call__`
        identifies it (what an express route asks, :mod:`.express`)."""
        if self.authenticator.ignores_credentials or scope["path"] in OPEN_PATHS:
            scope[IDENTITY] = ANONYMOUS
            return True
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        if scope["path"] in OPEN_PATHS:
            scope[IDENTITY] = ANONYMOUS
            await self.app(scope, receive, send)
            return
        try:
            scope[IDENTITY] = await self.authenticator.identify(scope["headers"])
        except GatewayError as error:
            await _refuse(scope, receive, send, error)
            return
        await self.app(scope, receive, send)


async def _refuse(scope: Scope, receive: Receive, send: Send, error: GatewayError) -> None:
    if scope["type"] == "websocket" and "websocket.http.response" not in scope.get(
        "extensions", {}
    ):
        log_answered(scope, error, error.status)
        await send({"type": "websocket.close", "code": 1008, "reason": error.message})
        return
    answer = messages.error_response_for(scope)(error)
    log_answered(scope, error, answer.status_code)  # a 503: as a route's 5xx is logged
    await answer(scope, receive, send)
