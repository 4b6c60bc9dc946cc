"""The HTTP trace in memory: which answers it notes, what a mark sees since, and the cap on
a JSON answer's body, counted as its bytes arrive."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2
import pytest
from mcp.client.streamable_http import MCP_SESSION_ID

from stateway.mcp_client.transports import BodyTooLarge, HttpEvent, HttpTrace


class Chunks(httpx2.AsyncByteStream):
    def __init__(self, *chunks: bytes) -> None:
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk


def answer(
    status: int,
    content_type: str = "application/json",
    *chunks: bytes,
    method: str = "POST",
    headers: dict[str, str] | None = None,
) -> httpx2.Response:
    request = httpx2.Request(method, "http://mcp.test/mcp", headers=headers)
    return httpx2.Response(
        status,
        headers={"content-type": content_type},
        stream=Chunks(*chunks),
        request=request,
    )


async def test_a_mark_sees_only_the_answers_noted_after_it() -> None:
    noted: list[None] = []
    trace = HttpTrace(on_event=lambda: noted.append(None))
    assert trace.since(0) is None

    await trace.observe(answer(500, "text/plain"))
    first = trace.serial
    assert trace.since(0) == HttpEvent(first, 500, "text/plain", session_gone=False)
    assert trace.since(first) is None

    await trace.observe(answer(401, "text/plain"))
    assert trace.since(first) == HttpEvent(trace.serial, 401, "text/plain", session_gone=False)
    assert trace.since(trace.serial) is None
    assert len(noted) == 2


@pytest.mark.parametrize(
    ("status", "content_type"),
    [(200, "application/json"), (200, "Text/Event-Stream; charset=utf-8"), (202, "text/plain")],
)
async def test_mcp_answers_are_not_noted(status: int, content_type: str) -> None:
    trace = HttpTrace()

    await trace.observe(answer(status, content_type))

    assert (trace.serial, trace.since(0)) == (0, None)


async def test_only_answers_to_posts_are_noted() -> None:
    trace = HttpTrace()

    await trace.observe(answer(500, "text/plain", method="GET"))
    await trace.observe(answer(404, "text/plain", method="DELETE"))

    assert trace.since(0) is None


async def test_a_foreign_content_type_is_noted_as_sent() -> None:
    trace = HttpTrace()

    await trace.observe(answer(200, "Text/HTML; charset=utf-8"))

    assert trace.since(0) == HttpEvent(1, 200, "text/html", session_gone=False)


@pytest.mark.parametrize(
    ("status", "headers", "gone"),
    [(404, {MCP_SESSION_ID: "abc"}, True), (404, {}, False), (400, {MCP_SESSION_ID: "abc"}, False)],
)
async def test_a_session_is_gone_only_for_a_404_to_a_request_naming_it(
    status: int, headers: dict[str, str], gone: bool
) -> None:
    trace = HttpTrace()

    await trace.observe(answer(status, "text/plain", headers=headers))

    event = trace.since(0)
    assert event is not None
    assert event.session_gone is gone


async def read(response: httpx2.Response) -> bytes:
    return b"".join([chunk async for chunk in response.stream])  # type: ignore[union-attr]


async def test_a_json_body_of_exactly_the_limit_is_read_whole() -> None:
    trace = HttpTrace(max_body_bytes=10)
    response = answer(200, "application/json", b"12345", b"67890")

    await trace.observe(response)

    assert await read(response) == b"1234567890"
    assert trace.since(0) is None


@pytest.mark.parametrize("chunks", [(b"12345", b"678901"), (b"12345678901",)])
async def test_a_json_body_past_the_limit_is_cut_and_noted(chunks: tuple[bytes, ...]) -> None:
    trace = HttpTrace(max_body_bytes=10)
    response = answer(200, "application/json", *chunks)
    await trace.observe(response)

    with pytest.raises(BodyTooLarge, match=r"^longer than 10 bytes$"):
        await read(response)

    assert trace.since(0) == HttpEvent(1, 200, "application/json", False, oversized=True)


async def test_a_compressed_json_body_is_refused_at_its_first_byte() -> None:
    trace = HttpTrace()
    response = answer(200, "application/json", b"x")
    response.headers["content-encoding"] = " GZip "

    await trace.observe(response)

    assert trace.since(0) == HttpEvent(1, 200, "application/json (gzip)", False)
    with pytest.raises(BodyTooLarge):
        await read(response)


async def test_an_answer_without_a_content_type_is_noted_without_one() -> None:
    trace = HttpTrace()
    response = answer(200)
    del response.headers["content-type"]

    await trace.observe(response)

    assert trace.since(0) == HttpEvent(1, 200, "", session_gone=False)
