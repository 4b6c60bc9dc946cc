"""What one request may take of ``/mcp``: its body read ahead of the SDK within the
bounds of every route's (end to end: ``tests/e2e/test_http_surface.py``)."""

from __future__ import annotations

import asyncio

import pytest
from starlette.requests import ClientDisconnect
from starlette.types import Message

from stateway.core.errors import BodyTimeout, RequestTooLarge
from stateway.surfaces.mcp.limits import McpLimits, body_read_ahead


def scope(length: int | None = None) -> dict[str, object]:
    headers = [] if length is None else [(b"content-length", str(length).encode())]
    return {"type": "http", "method": "POST", "path": "/mcp", "headers": headers}


async def test_the_body_is_read_whole_then_given_to_the_sdk_in_one_message() -> None:
    parts = [
        {"type": "http.request", "body": b'{"a": ', "more_body": True},
        {"type": "http.request", "body": b"1}", "more_body": False},
        {"type": "http.disconnect"},
    ]

    async def receive() -> Message:
        return parts.pop(0)

    replay = await body_read_ahead(scope(), receive, McpLimits())

    assert await replay() == {"type": "http.request", "body": b'{"a": 1}', "more_body": False}
    assert await replay() == {"type": "http.disconnect"}  # then the client's own


async def test_no_body_is_given_as_an_empty_one() -> None:
    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    replay = await body_read_ahead(scope(), receive, McpLimits())

    assert await replay() == {"type": "http.request", "body": b"", "more_body": False}


async def test_a_body_past_the_limit_is_refused() -> None:
    async def receive() -> Message:
        return {"type": "http.request", "body": b"x" * 2048, "more_body": True}

    with pytest.raises(RequestTooLarge):
        await body_read_ahead(scope(), receive, McpLimits(max_body_bytes=4096))
    with pytest.raises(RequestTooLarge):  # declared: refused before a byte is read
        await body_read_ahead(scope(length=4097), receive, McpLimits(max_body_bytes=4096))


async def test_a_body_that_does_not_arrive_in_time_is_refused() -> None:
    never = asyncio.Event()

    async def receive() -> Message:
        await never.wait()
        raise AssertionError("never sent")

    with pytest.raises(BodyTimeout):
        await body_read_ahead(scope(length=10), receive, McpLimits(body_timeout=0.01))


async def test_a_client_gone_mid_body_is_a_disconnect() -> None:
    parts = [
        {"type": "http.request", "body": b"{", "more_body": True},
        {"type": "http.disconnect"},
    ]

    async def receive() -> Message:
        return parts.pop(0)

    with pytest.raises(ClientDisconnect):
        await body_read_ahead(scope(length=10), receive, McpLimits())
