"""``first_token_timeout`` in the upstream client, against scripted loopback servers: the
wait after the headers for the first output, which the caller ends (an inference call's
:class:`FirstOutput`) or the first body chunk ends (a relay)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from aiohttp import web

from stateway.backends.upstream_http import UpstreamClient
from stateway.backends.upstream_target import UpstreamTarget
from stateway.core.deadline import FirstOutput
from stateway.core.errors import UpstreamError, UpstreamTimeout
from stateway.core.usage import Usage
from stateway.redaction import MASK
from tests.backends.conftest import Loopback

BODY: dict[str, Any] = {"model": "m"}
WAIT = 0.2
"""The client's ``first_token_timeout``."""
GAP = 0.6
"""Longer than it, well inside ``read_timeout``."""


def upstream(loopback: Loopback, url: str, **settings: Any) -> UpstreamClient:
    settings = {"read_timeout": 60.0, **settings}
    return loopback.adopt(UpstreamClient(UpstreamTarget("up", url, **settings)))


def paced(
    loopback: Loopback,
    *pieces: bytes | float,
    gone: asyncio.Event | None = None,
    content_type: str | None = None,
) -> Any:
    """A handler streaming ``pieces`` (bytes written, floats slept) after its headers (of
    ``content_type``, if given); with ``gone``, one that then stays silent, and sets it once
    the request is closed."""

    async def handler(request: web.Request) -> web.StreamResponse:
        headers = {"Content-Type": content_type} if content_type else None
        response = web.StreamResponse(headers=headers)
        await response.prepare(request)
        for piece in pieces:
            if isinstance(piece, float):
                await asyncio.sleep(piece)
            else:
                await response.write(piece)
        if gone is not None:
            try:
                await loopback.hold()
            finally:  # the client's closing cancels the handler
                gone.set()
        return response

    return handler


async def read(client: UpstreamClient, waiting: FirstOutput | None, output: bytes = b"") -> bytes:
    """One POST read chunk by chunk, its first output ended at the chunk holding ``output``
    (a caller that sees no output never ends it)."""
    received = b""
    async with client.post("/chat/completions", BODY, first_output=waiting) as reply:
        async for chunk in reply:
            received += chunk
            if waiting is not None and output and output in received:
                waiting.came()
    return received


async def test_no_output_within_it_fails_as_an_upstream_timeout(loopback: Loopback) -> None:
    """Bytes that are not output (what the caller does not take as such) do not end the
    wait; the upstream request is closed."""
    gone = asyncio.Event()
    url = await loopback.serve(paced(loopback, b"data: {}\n\n", gone=gone))
    client = upstream(loopback, url, first_token_timeout=WAIT)
    started = time.monotonic()
    with pytest.raises(UpstreamTimeout) as caught:
        await read(client, FirstOutput(), b"text")
    assert time.monotonic() - started < 3
    assert caught.value.code == "upstream_timeout"
    assert caught.value.status == 504
    assert "first_token_timeout" in caught.value.message
    await asyncio.wait_for(gone.wait(), 5)


async def test_a_whole_reply_late_after_its_headers_fails_so(loopback: Loopback) -> None:
    url = await loopback.serve(paced(loopback, 5.0, b"{}"))
    client = upstream(loopback, url, first_token_timeout=WAIT)
    waiting = FirstOutput()
    with pytest.raises(UpstreamTimeout, match="first_token_timeout"):
        async with client.post("/chat/completions", BODY, first_output=waiting) as reply:
            await reply.read()


async def test_it_never_fires_once_output_came(loopback: Loopback) -> None:
    """A gap longer than it after the first output is read_timeout's to judge."""
    url = await loopback.serve(paced(loopback, b"data: text\n\n", GAP, b"data: more\n\n"))
    client = upstream(loopback, url, first_token_timeout=WAIT)
    assert await read(client, FirstOutput(), b"text") == b"data: text\n\ndata: more\n\n"


@pytest.mark.parametrize(
    ("settings", "waiting"),
    [({}, FirstOutput()), ({"first_token_timeout": WAIT}, None)],
    ids=["unset", "not-an-inference-call"],
)
async def test_unset_or_without_a_first_output_the_wait_is_unbounded(
    loopback: Loopback, settings: dict[str, Any], waiting: FirstOutput | None
) -> None:
    url = await loopback.serve(paced(loopback, GAP, b"data: text\n\n"))
    client = upstream(loopback, url, **settings)
    assert await read(client, waiting) == b"data: text\n\n"


@pytest.mark.parametrize("content_type", [None, "text/event-stream"], ids=["whole", "stream"])
async def test_a_relay_whose_first_chunk_is_late_fails_before_relaying(
    loopback: Loopback, content_type: str | None
) -> None:
    """A whole answer's relay, and an event stream's (read event by event)."""
    gone = asyncio.Event()
    url = await loopback.serve(paced(loopback, gone=gone, content_type=content_type))
    client = upstream(loopback, url, first_token_timeout=WAIT)
    relay = await client.relay("/chat/completions", b"{}")
    chunks = relay.chunks()
    try:
        with pytest.raises(UpstreamTimeout, match="first_token_timeout"):
            await anext(chunks)  # not a byte relayed
    finally:
        await relay.aclose()
    await asyncio.wait_for(gone.wait(), 5)


@pytest.mark.parametrize("first_token_timeout", [WAIT, None])
async def test_a_relay_is_not_bounded_once_its_first_chunk_came(
    loopback: Loopback, first_token_timeout: float | None
) -> None:
    url = await loopback.serve(paced(loopback, b"data: a\n\n", GAP, b"data: b\n\n"))
    client = upstream(loopback, url, first_token_timeout=first_token_timeout)
    relay = await client.relay("/chat/completions", b"{}")
    try:
        assert b"".join([c async for c in relay.chunks()]) == b"data: a\n\ndata: b\n\n"
    finally:
        await relay.aclose()


async def test_its_error_names_the_model_server_and_the_setting(loopback: Loopback) -> None:
    """The message a client reads of a late first output, on either path."""
    expected = (
        "The model server 'up' sent no output within 0.2 s of its response headers "
        "(first_token_timeout)."
    )
    url = await loopback.serve(paced(loopback, gone=asyncio.Event()))
    client = upstream(loopback, url, first_token_timeout=WAIT)
    with pytest.raises(UpstreamTimeout) as posted:
        await read(client, FirstOutput())
    relay = await client.relay("/chat/completions", b"{}")
    try:
        with pytest.raises(UpstreamTimeout) as relayed:
            await anext(relay.chunks())
    finally:
        await relay.aclose()
    assert posted.value.message == relayed.value.message == expected


async def test_a_relays_first_chunk_counts_from_the_headers_not_from_zero(
    loopback: Loopback,
) -> None:
    """A first chunk that comes a little after the headers, within the setting, is
    relayed; one later than the setting fails, however short it is."""
    url = await loopback.serve(paced(loopback, 0.05, b"data: a\n\n"))
    client = upstream(loopback, url, first_token_timeout=WAIT)
    relay = await client.relay("/chat/completions", b"{}")
    try:
        assert b"".join([c async for c in relay.chunks()]) == b"data: a\n\n"
    finally:
        await relay.aclose()
    late = upstream(
        loopback,
        await loopback.serve(paced(loopback, 0.5, b"data: a\n\n")),
        first_token_timeout=0.05,
    )
    relay = await late.relay("/chat/completions", b"{}")
    try:
        with pytest.raises(UpstreamTimeout):
            await anext(relay.chunks())
    finally:
        await relay.aclose()


async def test_a_relay_of_an_empty_body_relays_nothing(loopback: Loopback) -> None:
    async def empty(request: web.Request) -> web.Response:
        return web.Response(status=500)

    client = upstream(loopback, await loopback.serve(empty), first_token_timeout=WAIT)
    relay = await client.relay("/chat/completions", b"{}")
    try:
        assert [c async for c in relay.chunks()] == []
        assert relay.usage() is None
    finally:
        await relay.aclose()


async def test_a_relays_first_chunk_is_scrubbed_and_counted_as_the_rest(
    loopback: Loopback,
) -> None:
    """The first chunk, read apart under the setting, is masked like every later one and
    is where the usage is read when it is the last."""
    key = "sk-Proj-AbCdEfGh0123456789-XyZ"
    sent = (
        b'{"choices": [], "note": "bad key ' + key.encode() + b'", '
        b'"usage": {"prompt_tokens": 3, "completion_tokens": 4}}'
    )

    async def echoes_the_key(request: web.Request) -> web.Response:
        return web.Response(body=sent, status=200, content_type="application/json")

    url = await loopback.serve(echoes_the_key)
    client = upstream(loopback, url, api_key=key, first_token_timeout=WAIT)
    relay = await client.relay("/chat/completions", b"{}")
    try:
        relayed = b"".join([c async for c in relay.chunks()])
    finally:
        await relay.aclose()
    assert key.encode() not in relayed
    assert relayed == sent.replace(key.encode(), MASK.encode())
    assert relay.usage() == Usage(input_tokens=3, output_tokens=4)


async def test_a_scrubbed_relays_empty_stream_is_cut_not_a_crash(loopback: Loopback) -> None:
    """A stream that ends with no byte, read apart under the setting for a backend with a
    key (its reads masked): the cut a stream with no byte is, as without either."""

    async def empty(request: web.Request) -> web.Response:
        return web.Response(body=b"", status=200, content_type="text/event-stream")

    url = await loopback.serve(empty)
    client = upstream(
        loopback, url, api_key="sk-Proj-AbCdEfGh0123456789-XyZ", first_token_timeout=WAIT
    )
    relay = await client.relay("/chat/completions", b"{}")
    try:
        with pytest.raises(UpstreamError) as cut:
            await anext(relay.chunks())
    finally:
        await relay.aclose()
    assert cut.value.code == "upstream_stream_cut"
