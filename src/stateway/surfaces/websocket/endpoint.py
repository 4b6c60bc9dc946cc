"""The ASGI app of ``GET /v1/responses`` upgraded to a WebSocket, and its sessions.

The upgrade is accepted with or without ``openai-beta: responses_websockets=2026-02-06``
(the SDK sends none); it was authenticated by the HTTP surface's middleware before it got
here. An upgrade from a web page of another site (its ``Origin`` is not the gateway's, nor
one of ``[server] cors_origins``) is refused with 403 ``origin_not_allowed``: browsers let
any page open a WebSocket. With
auth configured, one tenant holds at most :data:`MAX_TENANT_CONNECTIONS` connections in a
process (beyond, the upgrade is a 429 ``too_many_connections``): each may keep
``[websocket] max_checkpoint_bytes`` of responses in memory while idle, so connections
without end would let one tenant take the process's memory from every other. At
shutdown, :meth:`WebSocketResponses.drain` refuses new request frames (503 error frames),
lets each session's requests end, then closes it with 1001; the server's drain window
bounds it (the runs still going are ended then, which ends their streams).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Final

from starlette.types import Receive, Scope, Send

from stateway.core.errors import InvalidRequest
from stateway.core.gateway import Gateway
from stateway.surfaces.asgi.answers import error_response
from stateway.surfaces.asgi.hosts import cross_site
from stateway.surfaces.auth.authenticator import identity_of
from stateway.surfaces.websocket.session import Session
from stateway.websocket_config import WebSocketConfig

MAX_TENANT_CONNECTIONS: Final = 100
"""WebSocket connections one tenant may hold open at once in one process, with auth
configured (as many as it may hold MCP sessions)."""


class TenantConnectionsFull(InvalidRequest):
    """A tenant opening a connection while it holds as many as it may."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"This tenant has {limit} WebSocket connections open, as many as it may; "
            "close one first.",
            code="too_many_connections",
            status=429,
        )


class WebSocketResponses:
    def __init__(
        self,
        gateway: Gateway,
        config: WebSocketConfig,
        max_frame_bytes: int,
        *,
        max_input_items: int | None = None,
        tenant_connections: int | None = None,
        origins: frozenset[str] = frozenset(),
    ) -> None:
        """``tenant_connections``: connections one tenant may hold open (None: any
        number; without auth every caller is one tenant); ``origins``: the web pages'
        origins allowed besides the gateway's own (``"*"``: any)."""
        self.gateway = gateway
        self.config = config
        self.max_frame_bytes = max_frame_bytes
        self.max_input_items = max_input_items
        self.sessions: set[Session] = set()
        self.draining = False
        self._tenant_connections = tenant_connections
        self._origins = origins
        self._held: Counter[str] = Counter()
        """Connections open per tenant (only with ``tenant_connections``)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = await receive()
        if message["type"] != "websocket.connect":
            return
        if cross_site(scope, self._origins):
            await _refuse(scope, receive, send, _cross_site())
            return
        limit = self._tenant_connections
        tenant = None if limit is None else self._tenant_of(scope)
        if tenant is not None and limit is not None:
            if self._held[tenant] >= limit:
                await _refuse(scope, receive, send, TenantConnectionsFull(limit))
                return
            self._held[tenant] += 1
        try:
            await send({"type": "websocket.accept"})
            session = Session(self, scope, send)
            self.sessions.add(session)
            try:
                await session.serve(receive)
            finally:
                self.sessions.discard(session)
        finally:
            if tenant is not None:
                self._held[tenant] -= 1
                if not self._held[tenant]:
                    del self._held[tenant]

    def _tenant_of(self, scope: Scope) -> str | None:
        """The tenant a connection is counted against; None for the admin credential's
        (it acts for no tenant: its request frames are refused)."""
        principal = identity_of(scope).principal
        return None if principal is None else principal.tenant_id

    async def drain(self) -> None:
        """Refuse new requests, let those in flight end, close every session (1001)."""
        self.draining = True
        await asyncio.gather(*(session.drain() for session in list(self.sessions)))


def _cross_site() -> InvalidRequest:
    return InvalidRequest(
        "WebSocket upgrades from a web page of another site are refused.",
        code="origin_not_allowed",
        status=403,
    )


async def _refuse(scope: Scope, receive: Receive, send: Send, error: InvalidRequest) -> None:
    """Deny the upgrade with ``error`` as its HTTP answer (or a 1008 close, where the
    server cannot send one)."""
    if "websocket.http.response" in scope.get("extensions", {}):
        await error_response(error)(scope, receive, send)
    else:
        await send({"type": "websocket.close", "code": 1008, "reason": error.message})
