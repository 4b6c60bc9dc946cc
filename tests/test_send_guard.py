"""Dropping a connection whose client stopped reading (``stateway.send_guard``): the
sweep's decisions in memory, given explicit times; then uvicorn as the gateway runs it, on
loopback sockets with a small receive buffer: a WebSocket client that stops reading is
dropped (its app sees it leave), as is one closed (4429) while it reads nothing, whose
close would otherwise wait for it for ever; a client that reads slowly is not. (HTTP
streams through the gateway: tests/e2e/test_send_timeout.py.)"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import uvicorn
from starlette.types import Receive, Scope, Send

from stateway.send_guard import SendGuarded
from stateway.serving import DenyingWebSocketProtocol, bind_socket, server_config

TIMEOUT = 10.0
SEND_TIMEOUT = 0.3
WAIT = 30.0
"""Seconds to wait for what the server must do; only a failing test waits this long."""


class Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.waiting = 0
        self.aborted = False
        self.aborts = 0

    def get_write_buffer_size(self) -> int:
        return self.waiting

    def abort(self) -> None:
        self.aborted = True
        self.aborts += 1


class Guarded(SendGuarded):
    def __init__(self) -> None:
        self.transport = Transport()

    def waiting(self, size: int) -> None:
        assert isinstance(self.transport, Transport)
        self.transport.waiting = size

    @property
    def aborted(self) -> bool:
        assert isinstance(self.transport, Transport)
        return self.transport.aborted


def test_output_waiting_untaken_past_the_timeout_is_dropped() -> None:
    guarded = Guarded()
    guarded.waiting(1000)
    guarded.abort_if_unread(100.0, TIMEOUT)  # first seen waiting: the clock starts
    guarded.abort_if_unread(100.0 + TIMEOUT, TIMEOUT)
    assert not guarded.aborted
    guarded.abort_if_unread(100.0 + TIMEOUT + 1, TIMEOUT)
    assert guarded.aborted


def test_one_byte_left_untaken_is_dropped_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    guarded = Guarded()
    guarded.waiting(1)
    with caplog.at_level(logging.INFO, logger="stateway.send_guard"):
        guarded.abort_if_unread(100.0, TIMEOUT)
        guarded.abort_if_unread(100.0 + TIMEOUT + 1, TIMEOUT)
    assert guarded.aborted
    [record] = caplog.records
    assert record.getMessage() == (
        "dropping a connection whose client took none of the 1 bytes waiting for it "
        "in 10 seconds (send_timeout)"
    )


def test_a_connection_is_dropped_once() -> None:
    """A look before the aborted connection is gone (its bytes still counted) starts the
    clock again rather than dropping it again."""
    guarded = Guarded()
    guarded.waiting(1000)
    guarded.abort_if_unread(100.0, TIMEOUT)
    guarded.abort_if_unread(100.0 + TIMEOUT + 1, TIMEOUT)
    guarded.abort_if_unread(100.0 + TIMEOUT + 2, TIMEOUT)
    assert isinstance(guarded.transport, Transport)
    assert guarded.transport.aborts == 1


def test_more_waiting_is_no_sign_of_a_reader() -> None:
    guarded = Guarded()
    guarded.waiting(1000)
    guarded.abort_if_unread(100.0, TIMEOUT)
    guarded.waiting(5000)  # the app wrote on; the client took nothing
    guarded.abort_if_unread(105.0, TIMEOUT)
    guarded.abort_if_unread(100.0 + TIMEOUT + 1, TIMEOUT)
    assert guarded.aborted


def test_the_clock_starts_again_whenever_the_client_took_some() -> None:
    guarded = Guarded()
    guarded.waiting(5000)
    guarded.abort_if_unread(100.0, TIMEOUT)
    guarded.waiting(4000)  # taken: fewer wait
    guarded.abort_if_unread(105.0, TIMEOUT)
    guarded.abort_if_unread(105.0 + TIMEOUT, TIMEOUT)
    assert not guarded.aborted
    guarded.resume_writing()  # drained to the low-water mark, then written past it again
    guarded.waiting(9000)
    guarded.abort_if_unread(105.0 + TIMEOUT + 1, TIMEOUT)
    guarded.abort_if_unread(105.0 + 2 * TIMEOUT + 1, TIMEOUT)
    assert not guarded.aborted
    guarded.waiting(0)  # all taken
    guarded.abort_if_unread(200.0, TIMEOUT)
    guarded.waiting(9000)
    guarded.abort_if_unread(201.0, TIMEOUT)
    guarded.abort_if_unread(201.0 + TIMEOUT, TIMEOUT)
    assert not guarded.aborted
    guarded.abort_if_unread(202.0 + TIMEOUT, TIMEOUT)
    assert guarded.aborted


@asynccontextmanager
async def serving(
    app: Any, send_timeout: float = SEND_TIMEOUT
) -> AsyncIterator[tuple[int, uvicorn.Server]]:
    """``app`` served on loopback as the gateway serves (its port, the server)."""
    sock = bind_socket("127.0.0.1", 0)
    sock.listen(16)
    config = server_config(app, lifespan=False, graceful_shutdown=1, send_timeout=send_timeout)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        deadline = time.monotonic() + WAIT
        while not server.started:
            assert time.monotonic() < deadline, "the server never started"
            await asyncio.sleep(0.01)
        yield sock.getsockname()[1], server
    finally:
        server.should_exit = True
        await task
        sock.close()


async def connect(
    port: int, request: bytes, *, small: bool = True
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection (with a small receive buffer, unless not ``small``), ``request`` sent
    and its answer's head read."""
    sock = socket.socket()
    if small:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(request)
    await reader.readuntil(b"\r\n\r\n")
    return reader, writer


async def until_dropped(server: uvicorn.Server) -> None:
    """Return once the server has no connection open (its transport gone)."""
    deadline = time.monotonic() + WAIT
    while server.server_state.connections:
        assert time.monotonic() < deadline, "the connection was never dropped"
        await asyncio.sleep(0.01)


def upgrade() -> bytes:
    key = base64.b64encode(os.urandom(16))
    return (
        b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: " + key + b"\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )


FRAME = "x" * 65536


async def test_a_websocket_client_that_stops_reading_is_dropped() -> None:
    left = asyncio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        await send({"type": "websocket.accept"})
        try:
            while True:
                await send({"type": "websocket.send", "text": FRAME})
                await asyncio.sleep(0)  # (a send the transport takes returns at once)
        except OSError:  # uvicorn's ClientDisconnected
            left.set()

    async with serving(app) as (port, server):
        _, writer = await connect(port, upgrade())
        writer.transport.pause_reading()  # type: ignore[attr-defined]
        async with asyncio.timeout(WAIT):
            await left.wait()
        await until_dropped(server)
        writer.close()


async def test_a_websocket_closed_while_its_client_reads_nothing_is_dropped() -> None:
    """A close queued behind bytes the client does not take (the gateway's 4429) waits
    for it for ever: the transport's close flushes first."""
    protocols: list[DenyingWebSocketProtocol] = []
    found = asyncio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        await send({"type": "websocket.accept"})
        await found.wait()
        [protocol] = protocols
        while protocol.writable.is_set():
            await send({"type": "websocket.send", "text": FRAME})
            await asyncio.sleep(0)
        await send({"type": "websocket.close", "code": 4429})

    async with serving(app) as (port, server):
        _, writer = await connect(port, upgrade())
        protocols.extend(
            c for c in server.server_state.connections if isinstance(c, DenyingWebSocketProtocol)
        )
        found.set()
        writer.transport.pause_reading()  # type: ignore[attr-defined]
        await until_dropped(server)
        writer.close()


async def disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def test_a_client_reading_slowly_is_not_dropped() -> None:
    """Slower than the app writes (the socket's buffers full), but reading all along."""
    left = asyncio.Event()
    send_timeout = 1.0

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        gone = asyncio.ensure_future(disconnected(receive))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        while not gone.done():
            await send({"type": "http.response.body", "body": b"x" * 65536, "more_body": True})
        left.set()

    async with serving(app, send_timeout) as (port, _):
        request = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        reader, writer = await connect(port, request, small=False)
        for _ in range(int(3 * send_timeout / 0.01)):
            assert await reader.read(65536)
            await asyncio.sleep(0.01)
        assert not left.is_set()
        writer.close()
        async with asyncio.timeout(WAIT):
            await left.wait()
