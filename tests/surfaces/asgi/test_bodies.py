"""A request's body read whole (:func:`stateway.surfaces.asgi.bodies.receive_body`): its
content codings undone as it arrives, its limit holding for what it decodes to."""

from __future__ import annotations

import gzip

import pytest
from starlette.types import Message, Receive

from stateway.core.errors import RequestTooLarge, UndecodableBody, UnsupportedContentEncoding
from stateway.surfaces.asgi.bodies import receive_body

BODY = b'{"model": "m", "input": "' + b"hi " * 10_000 + b'"}'


def scope(coding: str | None) -> dict[str, object]:
    headers = [(b"content-type", b"application/json")]
    if coding is not None:
        headers.append((b"content-encoding", coding.encode()))
    return {"type": "http", "headers": headers}


def sending(data: bytes, size: int = 1000) -> tuple[Receive, list[int]]:
    """A ``receive`` giving ``data`` in chunks of ``size``, and how many it gave."""
    chunks = [data[i : i + size] for i in range(0, len(data), size)] or [b""]
    given = [0]

    async def receive() -> Message:
        index = given[0]
        given[0] += 1
        more = index < len(chunks) - 1
        return {"type": "http.request", "body": chunks[index], "more_body": more}

    return receive, given


async def test_a_gzip_body_is_read_decoded() -> None:
    receive, _ = sending(gzip.compress(BODY), 100)
    assert await receive_body(scope("gzip"), receive, len(BODY)) == BODY


async def test_a_body_sent_plain_is_its_bytes() -> None:
    receive, _ = sending(BODY)
    assert await receive_body(scope(None), receive, len(BODY)) == BODY


async def test_the_limit_holds_for_the_decoded_body() -> None:
    receive, _ = sending(gzip.compress(BODY), 10)
    with pytest.raises(RequestTooLarge, match="decoded"):
        await receive_body(scope("gzip"), receive, len(BODY) - 1)


async def test_a_bomb_is_refused_as_it_comes() -> None:
    data = gzip.compress(bytes(10 * 1024 * 1024))  # about ten kilobytes
    receive, given = sending(data, 100)
    with pytest.raises(RequestTooLarge, match="decoded"):
        await receive_body(scope("gzip"), receive, 64 * 1024)
    assert given[0] < len(data) // 100  # not once it all came


async def test_an_empty_body_sent_as_gzip_is_empty() -> None:
    receive, _ = sending(b"")
    assert await receive_body(scope("gzip"), receive, 1024) == b""
    receive, _ = sending(gzip.compress(b""))
    assert await receive_body(scope("gzip"), receive, 1024) == b""


async def test_a_body_cut_short_is_undecodable() -> None:
    receive, _ = sending(gzip.compress(BODY)[:-8], 100)
    with pytest.raises(UndecodableBody):
        await receive_body(scope("gzip"), receive, len(BODY))


async def test_another_coding_is_refused_before_the_body_is_read() -> None:
    receive, given = sending(BODY)
    with pytest.raises(UnsupportedContentEncoding):
        await receive_body(scope("br"), receive, len(BODY))
    assert given[0] == 0
