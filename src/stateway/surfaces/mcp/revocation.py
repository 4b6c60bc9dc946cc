"""An MCP request served while its API key may be revoked: cut off once it is.

Every request to ``/mcp`` is authenticated as it arrives, so a revoked key's next one is
refused (401). What outlasts its arrival (the standalone GET stream carrying a 2025-11-25
session's notifications, a 2026-07-28 ``subscriptions/listen`` stream, a long tool call)
has its key checked again every :data:`CHECK_INTERVAL` seconds, through the key cache as
a WebSocket's request frames are (``current_principal``: a revocation is seen within the
cache's TTL). A key that no longer holds cuts the request off: a response under way ends
there (its SSE stream closed), one not yet started is the 401. Runs go on. An expired
credential is only refused from then on, its streams going on, as a WebSocket's do.
"""

from __future__ import annotations

import asyncio
from typing import Final

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stateway.core.errors import CredentialRevoked, GatewayError
from stateway.surfaces.auth.authenticator import current_principal, identity_of
from stateway.surfaces.http.transport import error_response

CHECK_INTERVAL: Final = 5.0
"""Seconds between checks of an open request's API key."""


async def serve_until_revoked(
    app: ASGIApp, scope: Scope, receive: Receive, send: Send
) -> CredentialRevoked | None:
    """Serve the request with ``app``, cut off if its key is revoked meanwhile; that
    revocation, if it was."""
    if identity_of(scope).recheck is None:  # no API key: only its expiry could end it
        await app(scope, receive, send)
        return None
    response = _Response(send)
    with anyio.CancelScope() as request:
        watch = asyncio.create_task(_revocation(scope, request))
        try:
            await app(scope, receive, response.send)
        finally:
            watch.cancel()
    if not request.cancelled_caught:
        return None
    revoked = watch.result()  # done: it returned as it cancelled the request
    await response.end(revoked, scope, receive)
    return revoked


async def _revocation(scope: Scope, request: anyio.CancelScope) -> CredentialRevoked:
    while True:
        await asyncio.sleep(CHECK_INTERVAL)
        try:
            await current_principal(scope)
        except CredentialRevoked as revoked:
            request.cancel()
            return revoked
        except GatewayError:  # expired (refused from now on), or the store unreachable
            continue


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
