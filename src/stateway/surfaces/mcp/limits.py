"""What one request and one tenant may take of ``/mcp``.

A request's body is read ahead of the ``mcp`` SDK, within the bounds every route's body
has (``[server] max_body_bytes``, ``request_body_timeout``), its content codings undone:
past them it is a 413 or a 408 in the OpenAI error shape (a coding not undone a 415), as
on the other routes (the SDK would wait for a body for ever, and bound it at 4 MiB with a
plain-text 413). A tool taking Responses input items takes at most ``[server]
max_input_items`` of them, as the route does. A listen stream follows at most
:data:`MAX_LISTENED` resources, each once however often it is named.
The process keeps at most :data:`MAX_SESSIONS` sessions open; with auth configured, one
tenant holds at most :data:`MAX_TENANT_SESSIONS` of them (``sessions.py``), so that no
tenant can take them all and keep every other one from opening a session.

Nothing here loads the SDK: the app builds :class:`McpLimits` before ``/mcp`` is used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from starlette.types import Message, Receive, Scope

from stateway.surfaces.asgi.bodies import receive_body

MAX_SESSIONS: Final = 1000
"""MCP sessions open at once in one process (the SDK's default is 10,000)."""
MAX_TENANT_SESSIONS: Final = 100
"""MCP sessions one tenant may hold open at once in one process, with auth configured."""
MAX_LISTENED: Final = 100
"""Resources one 2026-07-28 ``subscriptions/listen`` stream may follow (-32602 beyond):
one request names them all, and each is a response read or watched while it runs."""
MAX_BODY_BYTES: Final = 32 * 1024 * 1024
"""``[server] max_body_bytes``'s default."""


@dataclass(frozen=True, slots=True)
class McpLimits:
    max_body_bytes: int = MAX_BODY_BYTES
    body_timeout: float | None = None
    """Seconds a request's body may take to arrive (408 after); None: no bound."""
    tenant_sessions: int | None = None
    """Sessions one tenant may hold open; None: any number, up to the process's (without
    auth, every caller is one tenant)."""
    max_input_items: int | None = None
    """``[server] max_input_items``: the input items (and ten times as many content
    parts) one ``create_response`` call may carry, as one request to the route may;
    None: no bound."""


async def body_read_ahead(scope: Scope, receive: Receive, limits: McpLimits) -> Receive:
    """``receive`` for the SDK, the request's body read whole within ``limits`` first,
    decoded. Raises ``RequestTooLarge``, ``BodyTimeout``, ``UnsupportedContentEncoding``,
    ``UndecodableBody``, or ``ClientDisconnect`` (the client left). Only a ``POST``'s
    body is read (the SDK reads no other's: ``GET`` opens a stream, ``DELETE`` ends a
    session): another request's ``receive`` is returned as it is, and the
    ``Content-Encoding`` it names ignored, as every route's bodiless requests do."""
    if scope["method"] != "POST":
        return receive
    body = await receive_body(scope, receive, limits.max_body_bytes, limits.body_timeout)
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Message:
        if pending:
            return pending.pop()
        return await receive()

    return replay
