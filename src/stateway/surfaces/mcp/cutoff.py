"""An MCP request served while its credential may be revoked or expire: cut off once it is.

What outlasts a request's arrival (the standalone GET stream carrying a 2025-11-25
session's notifications, a 2026-07-28 ``subscriptions/listen`` stream, a long tool call)
has its credential watched by a :class:`~stateway.surfaces.auth.revocation.RevocationWatch`,
as every surface's streams are (an API key checked again, a credential ended at its
expiry). One that no longer holds cuts the request off: a response under way ends there
(its SSE stream closed), one not yet started is the 401. Runs go on.
"""

from __future__ import annotations

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stateway.core.errors import CredentialRevoked
from stateway.surfaces.asgi.answers import error_response
from stateway.surfaces.auth.revocation import RevocationWatch


async def serve_until_revoked(
    app: ASGIApp, scope: Scope, receive: Receive, send: Send
) -> CredentialRevoked | None:
    """Serve the request with ``app``, cut off if its credential is revoked or expires
    meanwhile; that error, if it was."""
    seen: list[CredentialRevoked] = []
    with anyio.CancelScope() as request:

        def revoked(error: CredentialRevoked) -> None:
            seen.append(error)
            request.cancel()

        watch = RevocationWatch.start(scope, revoked)
        if watch is None:  # a credential that can neither be revoked nor expire
            await app(scope, receive, send)
            return None
        response = _Response(send)
        try:
            await app(scope, receive, response.send)
        finally:
            watch.stop()
    if not seen:
        return None
    await response.end(seen[0], scope, receive)
    return seen[0]


class _Response:
    """The request's response as sent so far, so that a cut-off one can be ended."""

    __slots__ = ("_send", "ended", "started")

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False
        self.ended = False

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
        elif message["type"] == "http.response.body" and not message.get("more_body"):
            self.ended = True
        await self._send(message)

    async def end(self, revoked: CredentialRevoked, scope: Scope, receive: Receive) -> None:
        if not self.started:
            await error_response(revoked)(scope, receive, self._send)
        elif not self.ended:
            await self._send({"type": "http.response.body", "body": b"", "more_body": False})
