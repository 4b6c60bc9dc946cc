"""A minimal in-process ASGI caller for HTTP surface tests (no network, no extra client)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.types import ASGIApp, Message


@dataclass
class Reply:
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    def json(self) -> Any:
        return orjson.loads(self.body)


async def call(
    app: ASGIApp,
    method: str,
    path: str,
    body: bytes = b"",
    query: str = "",
    leave: asyncio.Event | None = None,
    *,
    content_type: str | None = "application/json",
    headers: list[tuple[bytes, bytes]] | None = None,
    watch: Callable[[Message], None] | None = None,
    cut: int | None = None,
    read: Callable[[Message], Awaitable[None]] | None = None,
) -> Reply:
    """Call ``app`` once. The client stays until the response ends, or until ``leave``
    is set, when it disconnects; with ``cut``, it leaves once it has sent that many bytes
    of the body. ``headers`` are added to the request's; ``watch`` sees every message the
    app sends, as it is sent; ``read`` is awaited before each is taken in (a client slow
    to read it)."""
    sent_headers = [(b"content-length", str(len(body)).encode()), *(headers or [])]
    if content_type is not None:
        sent_headers.append((b"content-type", content_type.encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "headers": sent_headers,
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
        "state": {},
    }
    sent = False
    finished = asyncio.Event()
    reply = Reply()

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            if cut is not None:
                return {"type": "http.request", "body": body[:cut], "more_body": True}
            return {"type": "http.request", "body": body, "more_body": False}
        if cut is not None:
            return {"type": "http.disconnect"}
        waits = [asyncio.ensure_future(finished.wait())]
        if leave is not None:
            waits.append(asyncio.ensure_future(leave.wait()))
        _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for waiting in pending:
            waiting.cancel()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if watch is not None:
            watch(message)
        if read is not None:
            await read(message)
        if message["type"] == "http.response.start":
            reply.status = message["status"]
            reply.headers = {k.decode(): v.decode() for k, v in message.get("headers", [])}
        elif message["type"] == "http.response.body":
            reply.body += message.get("body", b"")
            if not message.get("more_body", False):
                finished.set()

    await app(scope, receive, send)
    return reply


async def stalled(app: ASGIApp, path: str, start: bytes) -> list[Message]:
    """POST to ``path`` a body that never finishes: ``start`` of a declared 40 bytes, then
    nothing (the client neither sends more nor leaves); every message the app sent, once
    its call ended (within 5 s)."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"content-length", b"40")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
        "state": {},
    }
    parts = [{"type": "http.request", "body": start, "more_body": True}]
    sent: list[Message] = []

    async def receive() -> Message:
        if parts:
            return parts.pop()
        await asyncio.Event().wait()
        raise AssertionError("never reached")

    async def send(message: Message) -> None:
        sent.append(message)

    await asyncio.wait_for(app(scope, receive, send), timeout=5)
    return sent


def opening_after_keep_alives(gate: asyncio.Event, count: int = 2) -> Callable[[Message], None]:
    """A ``watch`` for :func:`call` that sets ``gate`` once the app has sent ``count``
    keep-alive comments (a silent stream's model answers only then)."""
    seen = 0

    def watch(message: Message) -> None:
        nonlocal seen
        if message.get("body", b"") == b": keep-alive\n\n":
            seen += 1
            if seen == count:
                gate.set()

    return watch
