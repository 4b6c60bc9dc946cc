"""The ASGI app of ``GET /v1/responses`` upgraded to a WebSocket, and its sessions.

The upgrade is accepted with or without ``openai-beta: responses_websockets=2026-02-06``
(the SDK sends none); it was authenticated by the HTTP surface's middleware before it got
here. An upgrade from a web page of another site (its ``Origin`` is not the gateway's) is
refused with 403 ``origin_not_allowed``: browsers let any page open a WebSocket. At
shutdown, :meth:`WebSocketResponses.drain` refuses new request frames (503 error frames),
lets each session's requests end, then closes it with 1001; the server's drain window
bounds it (the runs still going are ended then, which ends their streams).
"""

from __future__ import annotations

import asyncio

from starlette.types import Receive, Scope, Send

from stateway.core.errors import InvalidRequest
from stateway.core.gateway import Gateway
from stateway.surfaces.http.hosts import cross_site
from stateway.surfaces.http.transport import error_response
from stateway.surfaces.websocket.session import Session
from stateway.websocket_config import WebSocketConfig


class WebSocketResponses:
    def __init__(
        self,
        gateway: Gateway,
        config: WebSocketConfig,
        max_frame_bytes: int,
        *,
        max_input_items: int | None = None,
    ) -> None:
        self.gateway = gateway
        self.config = config
        self.max_frame_bytes = max_frame_bytes
        self.max_input_items = max_input_items
        self.sessions: set[Session] = set()
        self.draining = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = await receive()
        if message["type"] != "websocket.connect":
            return
        if cross_site(scope):
            await _refuse(scope, receive, send)
            return
        await send({"type": "websocket.accept"})
        session = Session(self, scope, send)
        self.sessions.add(session)
        try:
            await session.serve(receive)
        finally:
            self.sessions.discard(session)

    async def drain(self) -> None:
        """Refuse new requests, let those in flight end, close every session (1001)."""
        self.draining = True
        await asyncio.gather(*(session.drain() for session in list(self.sessions)))


async def _refuse(scope: Scope, receive: Receive, send: Send) -> None:
    error = InvalidRequest(
        "WebSocket upgrades from a web page of another site are refused.",
        code="origin_not_allowed",
        status=403,
    )
    if "websocket.http.response" in scope.get("extensions", {}):
        await error_response(error)(scope, receive, send)
    else:
        await send({"type": "websocket.close", "code": 1008, "reason": error.message})
