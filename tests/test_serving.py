"""uvicorn as the gateway runs it (``stateway.serving``): the socket it binds hands out
connections that send small writes at once, and its WebSocket protocol writes a turn's
text frames in one write while the transport takes them, in order, and makes a send wait
as uvicorn's does once the transport pauses."""

from __future__ import annotations

import asyncio
import errno
import socket
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState
from websockets.frames import Frame, Opcode
from websockets.streams import StreamReader

from stateway.serving import (
    DenyingWebSocketProtocol,
    ListenFailed,
    bind_socket,
    listen_failure,
    server_config,
)

HANDSHAKE = (
    b"GET /v1/responses HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n"
    b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    b"Sec-WebSocket-Version: 13\r\n\r\n"
)


class Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 1), "sockname": ("127.0.0.1", 2)}.get(name, default)

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


def frames_in(data: bytes) -> list[str]:
    """The text frames in ``data`` (the server's, unmasked)."""
    reader = StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    texts = []
    parser = Frame.parse(reader.read_exact, mask=False)
    while True:
        try:
            next(parser)
        except StopIteration as done:
            frame = done.value
        except EOFError:
            return texts
        else:
            continue
        assert frame.opcode is Opcode.TEXT
        texts.append(frame.data.decode())
        parser = Frame.parse(reader.read_exact, mask=False)


async def served(app: Any) -> tuple[DenyingWebSocketProtocol, Transport]:
    config = uvicorn.Config(app, ws=DenyingWebSocketProtocol, log_level="warning")
    config.load()
    protocol = DenyingWebSocketProtocol(config, ServerState(), {})
    transport = Transport()
    protocol.connection_made(transport)
    protocol.data_received(HANDSHAKE)
    return protocol, transport


async def test_frames_sent_in_one_turn_leave_in_one_write_in_order() -> None:
    sent = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "websocket.accept"})
        for n in range(20):
            await send({"type": "websocket.send", "text": f"event {n}"})
        sent.set()
        await receive()

    protocol, transport = await served(app)
    await sent.wait()
    await asyncio.sleep(0)

    [_, frames] = transport.writes  # the handshake's answer, then every frame at once
    assert frames_in(frames) == [f"event {n}" for n in range(20)]
    protocol.connection_lost(None)


async def test_a_paused_transport_makes_the_next_send_wait() -> None:
    progress: list[int] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.send", "text": "first"})
        progress.append(1)
        await asyncio.sleep(0.01)  # written meanwhile
        protocol.pause_writing()
        await send({"type": "websocket.send", "text": "second"})
        progress.append(2)
        await receive()

    protocol, transport = await served(app)
    await asyncio.sleep(0.05)
    assert progress == [1]
    assert frames_in(b"".join(transport.writes[1:])) == ["first"]

    protocol.resume_writing()
    await asyncio.sleep(0.01)
    assert progress == [1, 2]
    assert frames_in(b"".join(transport.writes[1:])) == ["first", "second"]
    protocol.connection_lost(None)


async def test_connections_to_a_bound_socket_send_small_writes_at_once() -> None:
    """TCP_NODELAY on every accepted connection. asyncio sets it only on a socket made for
    TCP (``IPPROTO_TCP``), which an accepted one is when its listener is: without it, an
    answer uvicorn writes as its headers, then its body, had the body wait under Nagle's
    algorithm for the client's delayed ACK, ~40 ms per JSON answer on a kept-alive
    connection (uvloop sets it on any socket; asyncio runs the gateway where uvloop is
    missing, and runs the tests)."""
    sock = bind_socket("127.0.0.1", 0)
    nodelay: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = writer.get_extra_info("socket")
        nodelay.set_result(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    async with await asyncio.start_server(accept, sock=sock):
        _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        try:
            assert await asyncio.wait_for(nodelay, 5) != 0
        finally:
            writer.close()


def test_a_port_in_use_says_so_and_what_to_do() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ListenFailed) as failed:
            bind_socket("127.0.0.1", port)
    assert str(failed.value) == (
        f"cannot listen on 127.0.0.1:{port}: Address already in use (another process "
        "listens there: stop it, or choose another port; 0 picks a free one)"
    )


@pytest.mark.parametrize(
    ("host", "hint"),
    [
        ("192.0.2.1", "192.0.2.1 is not an address of this machine"),  # TEST-NET-1
        ("no-such-host.invalid", "no-such-host.invalid is not a name this machine resolves"),
    ],
)
def test_a_host_that_is_not_this_machines_says_so_and_what_to_do(host: str, hint: str) -> None:
    with pytest.raises(ListenFailed) as failed:
        bind_socket(host, 0)
    said = str(failed.value)
    assert said.startswith(f"cannot listen on {host}:0: ")
    assert f"({hint}: " in said
    assert "0.0.0.0 for all" in said


def test_a_privileged_port_says_what_it_needs() -> None:
    refused = OSError(errno.EACCES, "Permission denied")
    assert listen_failure("127.0.0.1", 80, refused) == (
        "cannot listen on 127.0.0.1:80: Permission denied (a port below 1024 needs root or "
        "CAP_NET_BIND_SERVICE: choose one of 1024 or above, such as 8080)"
    )
    assert listen_failure("127.0.0.1", 8080, refused) == (
        "cannot listen on 127.0.0.1:8080: Permission denied"
    )


async def test_an_answer_names_no_server_software() -> None:
    """No ``Server: uvicorn`` (what runs the gateway is no client's business, and each
    header costs every answer its validation in uvicorn); the ``Date`` stays."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    sock = bind_socket("127.0.0.1", 0)
    server = uvicorn.Server(server_config(app, lifespan=False, graceful_shutdown=1))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        for _ in range(3000):  # 30 s: only a failing test waits so long
            if server.started:
                break
            await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        writer.write(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        head = (await asyncio.wait_for(reader.read(), 10)).split(b"\r\n\r\n")[0].lower()
        writer.close()
    finally:
        server.should_exit = True
        await task
        sock.close()
    assert head.startswith(b"http/1.1 200")
    assert b"\r\ndate: " in head
    assert b"\r\nserver:" not in head
