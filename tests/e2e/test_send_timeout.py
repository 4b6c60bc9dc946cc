"""A client that stops reading a stream but keeps its connection open, through the real
``stateway serve`` on raw sockets (a small receive buffer, reading paused after the first
event): once its output has waited ``[server] send_timeout`` seconds without the client
taking a byte, the gateway drops the connection as if the client had left. A run it was
streaming ends ``incomplete`` (``client_disconnected``) and its upstream request is
closed; a relayed Chat Completions stream (which the client's pace holds back upstream)
is closed upstream too. (The sweep's decisions, and WebSocket connections:
tests/test_send_guard.py.)"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest
from starlette.types import Receive, Scope, Send

from tests.e2e.configured import RunningGateway, configured_gateway
from tests.support.mcp_server import serve_app

SEND_TIMEOUT = 0.5
WAIT = 30.0
"""Seconds to wait for what the gateway must do; only a failing test waits this long."""
PIECE = 16 * 1024
"""Characters of content per streamed chunk."""
PIECES = 800
"""Chunks in a whole answer (about 13 MB: under the default ``max_response_bytes``)."""
PACE = 0.01
"""Seconds between chunks: the answer takes 8 s or more, the client's buffers (a few MB on
loopback) fill in about one, so a client cut off after ``SEND_TIMEOUT`` is cut mid-answer."""

_CHUNK = (
    b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":"' + b"x" * PIECE + b'"},"finish_reason":null}]}\n\n'
)
_LAST = (
    b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
)


class PacedUpstream:
    """A Chat Completions server streaming a long answer at a steady pace, noting a client
    (the gateway) that leaves before its end, by the model it asked for."""

    def __init__(self, models: list[str]) -> None:
        self.left = {model: threading.Event() for model in models}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] != "POST":  # the gateway's look at /models
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": b'{"object":"list","data":[]}'})
            return
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        model = orjson.loads(raw)["model"]
        sse = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": sse})
        gone = asyncio.ensure_future(_disconnect(receive))
        try:
            for _ in range(PIECES):
                await send({"type": "http.response.body", "body": _CHUNK, "more_body": True})
                await asyncio.sleep(PACE)
                if gone.done():
                    self.left[model].set()
                    return
            await send({"type": "http.response.body", "body": _LAST, "more_body": False})
        finally:
            gone.cancel()


async def _disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


MODELS = ["responses", "messages", "chat"]


class Setup:
    def __init__(self, gateway: RunningGateway, upstream: PacedUpstream) -> None:
        self.gateway = gateway
        self.upstream = upstream


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    upstream = PacedUpstream(MODELS)
    env = {"STATEWAY_SEND_TIMEOUT": str(SEND_TIMEOUT)}
    with (
        serve_app(upstream, lifespan=False) as base,
        configured_gateway(
            tmp_path_factory.mktemp("send"), {"url": base + "/v1", "api": "chat"}, env=env
        ) as gateway,
    ):
        yield Setup(gateway, upstream)


async def stalled(url: str, path: str, body: dict[str, Any]) -> tuple[asyncio.StreamWriter, bytes]:
    """Send a streamed request on a connection with a small receive buffer, read its
    headers and its first event, then stop reading (the connection stays open). Returns
    the connection and what was read."""
    address = urlsplit(url)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (address.hostname, address.port))
    reader, writer = await asyncio.open_connection(sock=sock)
    raw = orjson.dumps(body)
    writer.write(
        b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (path.encode(), len(raw), raw)
    )
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), head
    first = await reader.readuntil(b"\n\n")
    writer.transport.pause_reading()  # type: ignore[attr-defined]
    return writer, first


def retrieve(url: str, response_id: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/v1/responses/{response_id}") as reply:
        body: dict[str, Any] = orjson.loads(reply.read())
    return body


async def ended(url: str, response_id: str) -> dict[str, Any]:
    """The response once it is no longer in progress."""
    deadline = time.monotonic() + WAIT
    while True:
        body = await asyncio.to_thread(retrieve, url, response_id)
        if body["status"] != "in_progress":
            return body
        assert time.monotonic() < deadline, "the response never ended"
        await asyncio.sleep(0.05)


async def test_a_stalled_responses_stream_ends_its_run_as_a_client_that_left(
    setup: Setup,
) -> None:
    body = {"model": "responses", "input": "hi", "stream": True}
    writer, first = await stalled(setup.gateway.url, "/v1/responses", body)
    try:
        created = orjson.loads(first.split(b"data: ", 1)[1])
        response_id = created["response"]["id"]
        assert await asyncio.to_thread(setup.upstream.left["responses"].wait, WAIT)
        stored = await ended(setup.gateway.url, response_id)
    finally:
        writer.close()
    assert stored["status"] == "incomplete"
    assert stored["incomplete_details"] == {"reason": "client_disconnected"}
    assert 0 < len(stored["output"][0]["content"][0]["text"]) < PIECE * PIECES


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (
            "/v1/messages",
            {
                "model": "messages",
                "max_tokens": 100_000,
                "stream": True,
                "messages": [{"role": "user", "content": "hi"}],
            },
        ),
        (
            "/v1/chat/completions",  # the fast path: relayed, the client's pace held upstream
            {"model": "chat", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
        ),
    ],
    ids=["messages", "chat"],
)
async def test_a_stalled_stream_closes_its_upstream_request(
    setup: Setup, path: str, body: dict[str, Any]
) -> None:
    writer, _ = await stalled(setup.gateway.url, path, body)
    try:
        assert await asyncio.to_thread(setup.upstream.left[body["model"]].wait, WAIT)
    finally:
        writer.close()
