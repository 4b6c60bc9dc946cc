"""A relayed read that ends inside an event holds back that event's start alone: what the
reads so far hold whole (events, comment lines: a proxy's keepalive) goes out at once,
without waiting for the upstream's next read (:mod:`stateway.backends.relayed_stream`). A
client's reader could not use more, and a proxy before the client counts its idle time
from the last byte it passed: a keepalive held until the upstream's next write (its next
keepalive, when it is silent) would arrive a keepalive late."""

from __future__ import annotations

import asyncio
import random

import orjson
import pytest
from aiohttp import web

from stateway.backends.chat_forwarder import OpenAIChatBackend
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
    assert await relayed_while_silent(loopback, writes, len(whole), REST) == whole


STREAM = ROLE + b": keep-alive\n\n" + REST
"""An answer with a proxy's keepalive among its events."""
STREAMS = {
    "lf": STREAM,
    "crlf": STREAM.replace(b"\n", b"\r\n"),
    "cr": STREAM.replace(b"\n", b"\r"),
}
SPLIT = random.Random(11)
SPLITS = [
    (name, sorted(SPLIT.sample(range(1, len(stream) - len(DONE)), SPLIT.randint(1, 5))))
    for name, stream in STREAMS.items()
    for _ in range(40)
]


def whole_of(data: bytes) -> bytes:
    """What ``data`` holds whole: up to its last blank line or ended comment line (a CR
    that ends it may yet be the start of a CRLF)."""
    at = start = 0
    for line in data.splitlines(keepends=True):
        start += len(line)
        if not line.endswith((b"\n", b"\r")) or (line.endswith(b"\r") and start == len(data)):
            break
        if line.strip(b"\r\n") == b"" or line[:1] == b":":
            at = start
    return data[:at]


@pytest.mark.parametrize(("name", "cuts"), SPLITS, ids=[f"{n}-{c}" for n, c in SPLITS])
async def test_whole_events_go_out_at_once_however_the_reads_cut_them(
    loopback: Loopback, name: str, cuts: list[int]
) -> None:
    """Cut into reads at seeded random places, a stream's whole events and comment lines
    go out before the upstream writes again, its line ends LF, CRLF or a CR alone (an
    event's blank line read apart from the line it ends among them)."""
    stream = STREAMS[name]
    writes = [stream[a:b] for a, b in zip([0, *cuts[:-1]], cuts, strict=True)]
    written = b"".join(writes)
    whole = whole_of(written)
    rest = stream[len(written) :]
    assert (await relayed_while_silent(loopback, writes, len(whole), rest)).startswith(whole)


async def relayed_while_silent(
    loopback: Loopback, writes: list[bytes], whole: int, rest: bytes
) -> bytes:
    """What the relay relayed of ``writes`` (the upstream writing each once the one before
    was read) once it relayed ``whole`` bytes of them, the upstream silent until then; the
    upstream then writes ``rest``, and the stream is relayed unchanged."""
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
        await response.write(rest)
        await response.write_eof()
        return response

    client = UpstreamClient(UpstreamTarget("up", await loopback.serve(answers)))
    relay = await OpenAIChatBackend(loopback.adopt(client)).forward_chat(
        b'{"stream": true}', orjson.loads(b'{"stream": true}')
    )
    chunks = reads_told(relay, read.set).chunks()
    relayed = b""
    async with asyncio.timeout(5):
        while len(relayed) < whole:
            relayed += await anext(chunks)
    before_silence = relayed
    relayed_whole.set()
    relayed += b"".join([chunk async for chunk in chunks])
    assert relayed == b"".join(writes) + rest
    await relay.aclose()
    return before_silence
