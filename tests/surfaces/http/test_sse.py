"""The SSE response: what it holds while it streams."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import AsyncGenerator

import pytest
from starlette.responses import Response
from starlette.types import Message

from stateway.core.errors import GatewayError
from stateway.surfaces.http.sse import SSEResponse


class Refusal:
    """How a stream that fails before it opens is answered; stands for what such an
    answer needs (a Messages request's whole body, to name a block at fault)."""

    def __call__(self, error: GatewayError) -> Response:
        raise AssertionError("the stream opened: no refusal is answered")


@pytest.mark.usefixtures("young_heap")
async def test_what_a_refusal_needs_is_let_go_once_the_stream_opens() -> None:
    """A stream's refusal is answered only before its status line goes out: what it
    holds (a request body of megabytes) is not kept for the rest of the stream."""
    opened, finish = asyncio.Event(), asyncio.Event()
    refusal = Refusal()
    watched = weakref.ref(refusal)

    async def frames() -> AsyncGenerator[tuple[bytes, bool], None]:
        yield b"data: {}\n\n", False
        await finish.wait()
        yield b"", True

    async def opening() -> None:
        return None

    async def receive() -> Message:
        await asyncio.Event().wait()
        raise AssertionError

    async def send(message: Message) -> None:
        if message["type"] == "http.response.body":
            opened.set()

    response = SSEResponse(frames(), lambda: None, opening=opening, error_response=refusal)
    del refusal
    scope = {"type": "http", "method": "POST", "path": "/"}
    serving = asyncio.create_task(response(scope, receive, send))
    await opened.wait()
    gc.collect()
    assert watched() is None, "the refusal is let go while the stream goes on"
    finish.set()
    await serving
