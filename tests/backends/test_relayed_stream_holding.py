"""A relayed read that ends inside an event holds back that event's start alone: what the
reads so far hold whole (events, comment lines: a proxy's keepalive) goes out at once,
without waiting for the upstream's next read (:mod:`stateway.backends.relayed_stream`). A
client's reader could not use more, and a proxy before the client counts its idle time
from the last byte it passed: a keepalive held until the upstream's next write (its next
keepalive, when it is silent) would arrive a keepalive late."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from stateway.backends.openai_chat import OpenAIChatBackend
from stateway.backends.upstream_http import UpstreamClient
from stateway.backends.upstream_target import UpstreamTarget
from tests.backends.conftest import Loopback
from tests.backends.test_relayed_stream import DONE, OUTPUT, ROLE, finished, reads_told

REST = OUTPUT + finished("stop") + DONE
"""What the upstream writes once the relay relayed what it was silent after."""


@pytest.mark.parametrize(
    ("writes", "whole"),
    [
        pytest.param([b": pi", b"ng\n"], b": ping\n", id="comment-line-split"),
        pytest.param([b": pi", b"ng", b"\r"], b": ping\r", id="comment-line-cr-split"),
        pytest.param([b": ping\n\n: pi"], b": ping\n\n", id="comment-then-part"),
        pytest.param([ROLE + OUTPUT[:9]], ROLE, id="event-then-part"),
        pytest.param([ROLE[:20], ROLE[20:] + OUTPUT[:9]], ROLE, id="event-split-then-part"),
        pytest.param(
            [OUTPUT[:9], OUTPUT[9:] + b": ke", b"ep-alive\n"],
            OUTPUT + b": keep-alive\n",
            id="event-then-comment-split",
        ),
        pytest.param(
            [(ROLE + b": ping\n\n" + OUTPUT[:9]).replace(b"\n", b"\r\n")],
            (ROLE + b": ping\n\n").replace(b"\n", b"\r\n"),
            id="crlf",
        ),
        pytest.param([ROLE[:-1], b"\n" + OUTPUT[:9]], ROLE, id="event-end-split-then-part"),
        pytest.param(
            [ROLE[:-2] + b"\r\n", b"\r\n" + OUTPUT[:9]],
            ROLE[:-2] + b"\r\n\r\n",
            id="event-end-split-crlf-then-part",
        ),
    ],
)
async def test_what_a_held_read_holds_whole_goes_out_while_the_upstream_is_silent(
    loopback: Loopback, writes: list[bytes], whole: bytes
) -> None:
    """The upstream writes ``writes`` (each once the one before was read), then stays
    silent until the relay relayed ``whole``: all the whole events and comment lines they
    hold. The rest of the stream follows unchanged."""
    read, relayed_whole = asyncio.Event(), asyncio.Event()

    async def answers(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for index, write in enumerate(writes):
            if index:
                await read.wait()
                read.clear()
            await response.write(write)
        await relayed_whole.wait()  # silent: a slow token, or a proxy's keepalive to come
        await response.write(REST)
        await response.write_eof()
        return response

    client = UpstreamClient(UpstreamTarget("up", await loopback.serve(answers)))
    relay = await OpenAIChatBackend(loopback.adopt(client)).forward_chat(b'{"stream": true}')
    chunks = reads_told(relay, read.set).chunks()
    relayed = b""
    async with asyncio.timeout(5):
        while len(relayed) < len(whole):
            relayed += await anext(chunks)
    assert relayed == whole
    relayed_whole.set()
    relayed += b"".join([chunk async for chunk in chunks])
    assert relayed == b"".join(writes) + REST
    await relay.aclose()
