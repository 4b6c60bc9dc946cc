"""uvicorn as the gateway runs it (``stateway.serving``): the socket it binds hands out
connections that send small writes at once, and its WebSocket protocol writes a turn's
text frames in one write while the transport takes them, in order, and makes a send wait
as uvicorn's does once the transport pauses."""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState
from websockets.frames import Frame, Opcode
from websockets.streams import StreamReader

from stateway.serving import (
    AnnouncingServer,
    DenyingWebSocketProtocol,
    Drain,
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


async def test_a_close_is_sent_past_a_client_that_stopped_reading() -> None:
    """A paused transport holds frames back, never the close: it is queued behind them."""
    closed = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "websocket.accept"})
        protocol.pause_writing()
        await send({"type": "websocket.close", "code": 4429})
        closed.set()

    protocol, transport = await served(app)
    await asyncio.wait_for(closed.wait(), 5)
    assert transport.writes[-1][:1] == b"\x88"  # a close frame (FIN, opcode 8)
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
    privileged = [
        port
        for port in (0, 1, 1023, 1024)
        if "below 1024" in listen_failure("127.0.0.1", port, refused)
    ]
    assert privileged == [1, 1023]


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


class HeldApp:
    """An app whose requests wait for :attr:`release`; ``events`` records, in order, what
    the drain did and when the application shut down."""

    def __init__(self, turns: int = 0) -> None:
        self.events: list[str] = []
        self.requested = asyncio.Event()
        self.release = asyncio.Event()
        self.turns = turns
        """Turns of the event loop a request takes to answer once released."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            self.events.append("application shut down")
            await send({"type": "lifespan.shutdown.complete"})
            return
        self.requested.set()
        await self.release.wait()
        for _ in range(self.turns):
            await asyncio.sleep(0)
        self.events.append("request answered")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


class StartedServer(AnnouncingServer):
    """Sets :attr:`up` once it accepts connections."""

    def __init__(self, config: uvicorn.Config, announcement: str, *, drain: Drain) -> None:
        super().__init__(config, announcement, drain=drain)
        self.up = asyncio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.up.set()


async def shut_down_with_a_request_in_flight(
    app: HeldApp, server: StartedServer, sock: socket.socket
) -> bytes:
    """Serve, send one request, begin shutting down once the app holds it (as SIGTERM
    does), and return its answer once the server is shut down."""
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await asyncio.wait_for(server.up.wait(), 30)
        reader, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        writer.write(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        await asyncio.wait_for(app.requested.wait(), 10)
        server.should_exit = True
        answer = await asyncio.wait_for(reader.read(), 30)
        writer.close()
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 30)
        sock.close()
    return answer


def drained(
    app: HeldApp, timeout: float, end: Callable[[], Awaitable[int]] | None = None, **kwargs: Any
) -> tuple[StartedServer, socket.socket]:
    """A server of ``app`` draining for ``timeout`` seconds, then ending what is in flight
    with ``end`` (by default: one request, released)."""

    async def release() -> int:
        app.events.append("ended")
        app.release.set()
        return 1

    config = server_config(app, lifespan=True, graceful_shutdown=30)
    drain = Drain(timeout, end or release, **kwargs)
    return StartedServer(config, "serving on a test socket", drain=drain), bind_socket(
        "127.0.0.1", 0
    )


async def test_shutdown_drains_sessions_then_requests_then_background_work_then_the_app(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """WebSocket sessions are drained first, with no new connection accepted; the request
    in flight, then the background work, finish in the window; nothing is ended; the
    application shuts down last."""
    app = HeldApp()

    async def sessions() -> None:
        serving = [listener.is_serving() for listener in server.servers]
        app.events.append(f"sessions drained, serving {serving}")
        app.release.set()

    async def settled() -> None:
        app.events.append("settled")

    server, sock = drained(app, 60, settled=settled, sessions=sessions, in_flight=lambda: 2)
    with caplog.at_level(logging.INFO, logger="stateway.serving"):
        answer = await shut_down_with_a_request_in_flight(app, server, sock)
    assert answer.startswith(b"HTTP/1.1 200")
    assert app.events == [
        "sessions drained, serving [False]",
        "request answered",
        "settled",
        "application shut down",
    ]
    assert [r.getMessage() for r in caplog.records if r.name == "stateway.serving"] == [
        "shutting down (drain window 60s): 1 request and 2 runs in flight",
        "shut down: 0 ended as server_shutting_down",
    ]
    assert capsys.readouterr().out == "serving on a test socket\n"


async def test_a_request_in_flight_past_the_drain_window_is_ended(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = HeldApp()
    server, sock = drained(app, 0, in_flight=lambda: 0)
    with caplog.at_level(logging.INFO, logger="stateway.serving"):
        answer = await shut_down_with_a_request_in_flight(app, server, sock)
    assert answer.startswith(b"HTTP/1.1 200")
    assert app.events == ["ended", "request answered", "application shut down"]
    assert [r.getMessage() for r in caplog.records if r.name == "stateway.serving"] == [
        "shutting down (drain window 0s): 1 request and 0 runs in flight",
        "drain window of 0s is over: ending requests still in flight",
        "shut down: 1 ended as server_shutting_down",
    ]


async def test_a_forced_quit_ends_what_is_in_flight_at_once_then_shuts_the_app_down(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A second SIGINT (uvicorn's force quit) within the window: the request in flight is
    ended without waiting for the window, background work is not waited for, and the
    application still shuts down (which uvicorn skips on a forced quit), once the request
    has answered, however many turns of the loop that takes."""
    app = HeldApp(turns=20)

    async def sessions() -> None:
        server.force_exit = True

    async def settled() -> None:
        app.events.append("settled")

    server, sock = drained(app, 60, settled=settled, sessions=sessions)
    with caplog.at_level(logging.INFO, logger="stateway.serving"):
        answer = await shut_down_with_a_request_in_flight(app, server, sock)
    assert answer.startswith(b"HTTP/1.1 200")
    assert app.events == ["ended", "request answered", "application shut down"]
    assert [r.getMessage() for r in caplog.records if r.name == "stateway.serving"] == [
        "shutting down (drain window 60s): 1 request in flight",
        "forced to quit: ending requests still in flight now",
        "shut down: 1 ended as server_shutting_down",
    ]


async def test_a_forced_quit_after_the_drain_window_still_shuts_the_app_down(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The window is over (what was in flight ended) and a request still answers when a
    second SIGINT comes: the application still shuts down (its store closed, its lease
    given back), and what the window's end ended is not ended again."""
    app = HeldApp()

    async def end() -> int:
        app.events.append("ended")
        server.force_exit = True  # as the request still answers
        app.release.set()
        return 1

    server, sock = drained(app, 0, end)
    with caplog.at_level(logging.INFO, logger="stateway.serving"):
        answer = await shut_down_with_a_request_in_flight(app, server, sock)
    assert answer.startswith(b"HTTP/1.1 200")
    assert app.events == ["ended", "request answered", "application shut down"]
    assert [r.getMessage() for r in caplog.records if r.name == "stateway.serving"][-1] == (
        "shut down: 1 ended as server_shutting_down"
    )


@pytest.mark.parametrize(
    ("asked", "level"),
    [("error", logging.ERROR), ("warning", logging.WARNING), ("debug", logging.WARNING)],
)
def test_uvicorn_is_never_louder_than_the_level_asked(asked: str, level: int) -> None:
    """Its own warnings (an invalid request, say) are dropped at ``[logging] level =
    "error"``, as every library's are; at lower levels it still says only warnings."""
    from stateway.telemetry.logs import quietened

    logger = logging.getLogger("uvicorn.error")
    saved = logger.level
    try:
        server_config(
            _never_called,
            lifespan=False,
            graceful_shutdown=1,
            own_logging=True,
            log_level=quietened(asked),  # type: ignore[arg-type]
        )
        assert logger.level == level
    finally:
        logger.setLevel(saved)


async def _never_called(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError("no request reaches it")
