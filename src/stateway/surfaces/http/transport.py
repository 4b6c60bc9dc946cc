"""HTTP transport pieces shared by the routes: bounded body reading, JSON and SSE
responses, and watching for a client that goes away.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from stateway.core.errors import GatewayError, InvalidRequest, RequestTooLarge

_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


class JSONResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def error_response(error: GatewayError) -> JSONResponse:
    return JSONResponse(
        {"error": error.to_dict()}, status_code=error.status, headers=error.headers or None
    )


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    if not chunks:
        raise InvalidRequest(
            "The request body is empty; expected a JSON object.", code="invalid_json"
        )
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _too_large(limit: int) -> RequestTooLarge:
    return RequestTooLarge(f"The request body exceeds the limit of {limit} bytes.")


async def watch_disconnect(receive: Receive, on_disconnect: Callable[[], None]) -> None:
    """Wait for ``http.disconnect`` and report it; run as a task, cancel when done."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            on_disconnect()
            return


Chunks = AsyncGenerator[tuple[bytes, bool], None]
"""Whole SSE frames (one or more per chunk), each flagged True when it is the last."""


class SSEResponse(Response):
    """Streams pre-encoded SSE frames, one ASGI body message per chunk; the last chunk
    also ends the body, sparing a separate write for the terminator.

    When the client goes away, ``on_disconnect`` is called once and streaming stops.
    """

    def __init__(self, frames: Chunks, on_disconnect: Callable[[], None]) -> None:
        super().__init__(status_code=200)
        self._frames = frames
        self._on_disconnect = on_disconnect
        self._gone = False

    def _disconnected(self) -> None:
        if not self._gone:
            self._gone = True
            self._on_disconnect()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        watcher = asyncio.create_task(watch_disconnect(receive, self._disconnected))
        ended = False
        try:
            async with aclosing(self._frames) as frames:
                async for chunk, last in frames:
                    if self._gone:
                        break
                    ended = last
                    await send({"type": "http.response.body", "body": chunk, "more_body": not last})
                    if last:
                        break
            if not self._gone and not ended:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            self._disconnected()
        finally:
            watcher.cancel()
