"""The header guard's sweep decisions in memory, given explicit times: a first request's
headers count from the connection, a later one's from the sweep that first saw it, and
a request pipelined behind a response in flight is not swept (and, too large, is answered
431 after it); a chunked body's trailer section is bounded as a header block is. (The real
sockets: tests/e2e/test_header_limits.py.)"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import pytest
import uvicorn
from starlette.types import Receive, Scope, Send
from uvicorn.server import ServerState

from stateway.header_guard import HeaderGuardedProtocol, HeaderLimits, guarded_http
from tests.test_serving import Transport as RecordingTransport

TIMEOUT = 10.0
REQUEST = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"


class Transport(RecordingTransport):
    """One a protocol can be served over: it reads, and knows its addresses."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = asyncio.Event()
        self.shut = asyncio.Event()
        """Its write side shut (``write_eof``): a 431 answered, the connection lingering."""
        self.reading = True

    def can_write_eof(self) -> bool:
        return True

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.shut.is_set():  # as asyncio's and uvloop's transports refuse it
            raise RuntimeError("Cannot call write() after write_eof()")
        super().write(data)

    def write_eof(self) -> None:
        self.shut.set()

    def close(self) -> None:
        super().close()
        self.closed.set()

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 1), "sockname": ("127.0.0.1", 2)}.get(name, default)


class App:
    """Answers each request once ``release`` is set."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.answered = asyncio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
        self.answered.set()


def connect(
    app: App, *, max_drain_bytes: int = 8192, server_state: ServerState | None = None
) -> tuple[HeaderGuardedProtocol, Transport, float]:
    """A connected protocol, its transport, and a time no later than its connection."""
    limits = HeaderLimits(max_bytes=2048, timeout=TIMEOUT, max_drain_bytes=max_drain_bytes)
    protocol_class = guarded_http(limits)
    config = uvicorn.Config(app, http=protocol_class, log_level="warning")
    before = time.monotonic()
    state = server_state or ServerState()
    protocol = protocol_class(config=config, server_state=state, app_state={})
    transport = Transport()
    protocol.connection_made(transport)
    return protocol, transport, before


async def test_a_first_request_counts_from_the_connection() -> None:
    protocol, transport, connected = connect(App())
    protocol.data_received(b"GET / HT")
    protocol.close_if_stalled(connected + TIMEOUT - 1, TIMEOUT)
    assert not transport.closing
    protocol.close_if_stalled(time.monotonic() + TIMEOUT + 1, TIMEOUT)
    assert transport.closing
    assert transport.writes == []


async def test_a_later_request_counts_from_the_sweep_that_first_saw_it() -> None:
    app = App()
    protocol, transport, _ = connect(app)
    app.release.set()
    protocol.data_received(REQUEST)
    await app.answered.wait()
    now = time.monotonic() + 1000  # long after the connection
    protocol.close_if_stalled(now, TIMEOUT)  # idle between requests: keep-alive's
    protocol.data_received(b"GET / HT")
    protocol.close_if_stalled(now + 1, TIMEOUT)  # first seen begun
    protocol.close_if_stalled(now + 1 + TIMEOUT, TIMEOUT)
    assert not transport.closing
    protocol.close_if_stalled(now + 2 + TIMEOUT, TIMEOUT)
    assert transport.closing


async def test_a_request_pipelined_behind_a_response_in_flight_is_not_swept() -> None:
    app = App()
    protocol, transport, _ = connect(app)
    protocol.data_received(REQUEST + b"GET / HT")
    later = time.monotonic() + 1000
    protocol.close_if_stalled(later, TIMEOUT)
    protocol.close_if_stalled(later + 2 * TIMEOUT, TIMEOUT)
    assert not transport.closing
    app.release.set()
    await app.answered.wait()
    protocol.close_if_stalled(later + 3 * TIMEOUT, TIMEOUT)  # first seen stalled
    protocol.close_if_stalled(later + 5 * TIMEOUT, TIMEOUT)
    assert transport.closing
    assert b"".join(transport.writes).startswith(b"HTTP/1.1 200 ")


async def test_oversized_headers_behind_a_response_in_flight_are_answered_431_after_it() -> None:
    app = App()
    protocol, transport, _ = connect(app)
    protocol.data_received(REQUEST + b"GET / HTTP/1.1\r\nX-Big: ")
    protocol.data_received(b"a" * 4096)
    assert not transport.closing  # a 431 now would cut into the first's response
    protocol.data_received(b"a" * 4096)  # read anyway (the app's receive resumes reading)
    assert not transport.closing
    app.release.set()
    await app.answered.wait()
    assert transport.shut.is_set()
    assert transport.reading  # the client's end of file is read (it closes the connection)
    answer = b"".join(transport.writes)
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert answer.index(b"ok") < answer.index(b"HTTP/1.1 431 ")


async def test_oversized_headers_are_answered_431_and_the_connection_lingers() -> None:
    """Answered, its write side shut, not closed: the client may still be sending (a close
    with bytes unread resets the connection, losing the answer). What comes is dropped,
    up to ``max_drain_bytes``; past it the connection is closed."""
    protocol, transport, _ = connect(App(), max_drain_bytes=4096)
    protocol.data_received(b"GET / HTTP/1.1\r\nX-Big: " + b"a" * 1024)
    assert not transport.shut.is_set()
    assert not transport.closing
    protocol.data_received(b"a" * 1024)
    assert transport.shut.is_set()
    assert not transport.closing
    answered = b"".join(transport.writes)
    assert answered.startswith(b"HTTP/1.1 431 ")
    for _ in range(4):
        protocol.data_received(b"a" * 1024)
    assert not transport.closing
    assert b"".join(transport.writes) == answered  # dropped, nothing more answered
    protocol.data_received(b"a")
    assert transport.closing


async def test_a_lingering_connection_is_closed_after_the_header_timeout() -> None:
    protocol, transport, connected = connect(App())
    protocol.data_received(b"GET / HTTP/1.1\r\nX-Big: " + b"a" * 4096)
    assert transport.shut.is_set()
    protocol.data_received(b"a" * 16)  # a trickle
    protocol.close_if_stalled(connected + TIMEOUT, TIMEOUT)
    assert not transport.closing
    protocol.close_if_stalled(time.monotonic() + TIMEOUT + 1, TIMEOUT)
    assert transport.closing


CHUNKED = b"POST / HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"
TRAILER = b"X-T: " + b"a" * 1000 + b"\r\n"


class Answering(App):
    """Answers at once, without reading the body; ``complete`` or only begun."""

    def __init__(self, *, complete: bool) -> None:
        super().__init__()
        self.complete = complete

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok", "more_body": not self.complete})
        self.answered.set()
        await self.release.wait()


async def test_trailers_over_the_limit_are_answered_431() -> None:
    protocol, transport, _ = connect(App())
    protocol.data_received(CHUNKED + b"2\r\n{}\r\n0\r\n")
    protocol.data_received(TRAILER)
    protocol.data_received(TRAILER)
    assert not transport.shut.is_set()
    assert not transport.closing
    protocol.data_received(TRAILER)
    assert transport.shut.is_set()
    assert b"".join(transport.writes).startswith(b"HTTP/1.1 431 ")


class Reading(App):
    """Reads the body to its end, then answers."""

    def __init__(self) -> None:
        super().__init__()
        self.received: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        while (message := await receive())["type"] == "http.request" and message["more_body"]:
            pass
        self.received.append(message["type"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"late"})
        self.answered.set()


async def test_a_request_whose_trailers_are_refused_ends_for_its_app_and_lingers() -> None:
    """Its app, waiting for the body's end, is told the client left (its answer is not
    written after the 431); the connection lingers ``timeout`` at most from the answer,
    though a request is in flight."""
    app = Reading()
    protocol, transport, _ = connect(app)
    protocol.data_received(CHUNKED + b"2\r\n{}\r\n0\r\n")
    await asyncio.sleep(0)  # the app waits for the body's end
    for _ in range(3):
        protocol.data_received(TRAILER)
    assert transport.shut.is_set()
    await asyncio.wait_for(app.answered.wait(), TIMEOUT)
    assert app.received == ["http.disconnect"]
    answer = b"".join(transport.writes)
    assert answer.startswith(b"HTTP/1.1 431 ")
    assert b"late" not in answer
    now = time.monotonic()
    protocol.close_if_stalled(now, TIMEOUT)
    assert not transport.closing
    protocol.close_if_stalled(now + TIMEOUT + 1, TIMEOUT)
    assert transport.closing


class Waiting(Reading):
    """Reads the body only once ``release`` is set."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.release.wait()
        await super().__call__(scope, receive, send)


async def test_trailers_refused_before_the_app_read_an_expected_body_end_it_quietly() -> None:
    """A request sent with ``Expect: 100-continue`` (its body sent without waiting), its
    trailers refused before its app first reads it: the app is told the client left, and
    no ``100 Continue`` is written after the 431 (the write side is shut: a write would
    raise in the app)."""
    app = Waiting()
    protocol, transport, _ = connect(app)
    expecting = CHUNKED.replace(b"\r\n\r\n", b"\r\nExpect: 100-continue\r\n\r\n")
    protocol.data_received(expecting + b"2\r\n{}\r\n0\r\n")
    for _ in range(3):
        protocol.data_received(TRAILER)
    assert transport.shut.is_set()
    app.release.set()
    await asyncio.wait_for(app.answered.wait(), TIMEOUT)
    assert app.received == ["http.disconnect"]
    assert b"".join(transport.writes).startswith(b"HTTP/1.1 431 ")


async def test_a_lingering_connection_is_closed_at_shutdown() -> None:
    """Its request (trailers refused) is in flight to uvicorn, which at shutdown would wait
    for it: answered already, the connection is closed then, not ``timeout`` later."""
    app = Reading()
    protocol, transport, _ = connect(app)
    protocol.data_received(CHUNKED + b"2\r\n{}\r\n0\r\n")
    await asyncio.sleep(0)
    for _ in range(3):
        protocol.data_received(TRAILER)
    assert transport.shut.is_set()
    assert not transport.closing
    protocol.shutdown()
    assert transport.closing


async def test_trailers_over_the_limit_after_a_response_began_close_without_a_431() -> None:
    app = Answering(complete=False)
    protocol, transport, _ = connect(app)
    protocol.data_received(CHUNKED + b"2\r\n{}\r\n0\r\n")
    await app.answered.wait()
    for _ in range(3):
        protocol.data_received(TRAILER)
    assert transport.closing
    assert b"HTTP/1.1 431 " not in b"".join(transport.writes)


async def test_a_body_answered_before_it_was_read_drains_up_to_the_body_limit() -> None:
    """The response complete, a chunk's data and a trailer section look alike (uvicorn
    drops the body): each may send up to ``max_drain_bytes``, not ``max_bytes``, so that a
    client sending its whole body first is not reset before it reads its answer."""
    app = Answering(complete=True)
    protocol, transport, _ = connect(app)
    protocol.data_received(CHUNKED + b"2000\r\n")  # one chunk of 8 KiB: four times max_bytes
    await app.answered.wait()
    for _ in range(8):
        protocol.data_received(b"a" * 1024)
    protocol.data_received(b"\r\n0\r\n")
    protocol.data_received(TRAILER)
    assert not transport.closing
    for _ in range(8):  # the trailer section past max_drain_bytes
        protocol.data_received(TRAILER)
    assert transport.closing
    assert b"HTTP/1.1 431 " not in b"".join(transport.writes)


async def test_trailers_over_the_limit_in_the_pipeline_are_431_after_the_responses_before() -> None:
    """No response to the request has begun (it is queued): once those before it are
    complete it is answered 431, as its header block would be; none of them is cut. The
    connection then lingers, as after any 431 (a close with the client's bytes unread would
    reset it), with no ``100 Continue`` for the refused request; a shutdown closes it."""
    app = App()
    protocol, transport, _ = connect(app, max_drain_bytes=4096)
    expecting = CHUNKED.replace(b"\r\n\r\n", b"\r\nExpect: 100-continue\r\n\r\n")
    protocol.data_received(REQUEST + REQUEST + expecting + b"2\r\n{}\r\n0\r\n")
    for _ in range(3):
        protocol.data_received(TRAILER)
    assert not transport.closing  # a 431 now would cut into the first's response
    protocol.data_received(TRAILER + b"\r\n")  # read anyway (the app's receive resumes reading)
    assert not transport.closing
    app.release.set()
    await asyncio.wait_for(transport.shut.wait(), TIMEOUT)
    assert not transport.closing
    assert transport.reading  # the client's end of file is read (it closes the connection)
    answer = b"".join(transport.writes)
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert answer.count(b"HTTP/1.1 200 ") == 2  # the refused request's app is not run
    assert answer.rindex(b"ok") < answer.index(b"HTTP/1.1 431 ")
    assert answer.endswith(b"Request header fields too large.")
    assert b"100 Continue" not in answer
    for _ in range(4):
        protocol.data_received(b"a" * 1024)  # dropped, up to max_drain_bytes
    assert not transport.closing
    assert b"".join(transport.writes) == answer
    protocol.shutdown()
    assert transport.closing


class Leaving(App):
    """Answers, then the connection closes (the client gone) before the next request's
    turn in the pipeline has come."""

    transport: Transport

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await super().__call__(scope, receive, send)
        self.transport.close()


async def test_a_request_refused_in_the_pipeline_gets_nothing_if_the_connection_closed() -> None:
    """Its turn comes with the connection closing (not yet lost): no 431 can be written,
    and uvicorn, seeing its app return without answering, writes no 500 in its place."""
    app = Leaving()
    protocol, transport, _ = connect(app)
    app.transport = transport
    protocol.data_received(REQUEST + CHUNKED + b"2\r\n{}\r\n0\r\n")
    for _ in range(3):
        protocol.data_received(TRAILER)
    app.release.set()
    await asyncio.wait_for(transport.closed.wait(), TIMEOUT)
    await asyncio.wait_for(asyncio.gather(*protocol.tasks), TIMEOUT)
    answer = b"".join(transport.writes)
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert answer.count(b"HTTP/1.1 ") == 1
    assert not transport.shut.is_set()


async def test_a_body_still_coming_after_its_answer_is_drained_for_the_timeout_at_most() -> None:
    """A client trickling the body of a request answered before it was read would hold
    the connection for ever (each byte restarts uvicorn's keep-alive timer): closed
    ``timeout`` after the sweep that first saw it so, as nginx's ``lingering_time``."""
    app = Answering(complete=True)
    protocol, transport, _ = connect(app)
    protocol.data_received(CHUNKED + b"100\r\n")
    await app.answered.wait()
    now = time.monotonic() + 1000
    protocol.close_if_stalled(now, TIMEOUT)  # first seen draining
    protocol.data_received(b"a" * 16)  # a trickle
    protocol.close_if_stalled(now + TIMEOUT, TIMEOUT)
    assert not transport.closing
    protocol.close_if_stalled(now + TIMEOUT + 1, TIMEOUT)
    assert transport.closing

    app = App()  # the whole body came before the answer: idle after it, keep-alive's
    protocol, transport, _ = connect(app)
    protocol.data_received(CHUNKED + b"2\r\n{}\r\n0\r\n\r\n")
    app.release.set()
    await app.answered.wait()
    protocol.close_if_stalled(now, TIMEOUT)
    protocol.close_if_stalled(now + 2 * TIMEOUT, TIMEOUT)
    assert not transport.closing


async def test_a_chunked_body_far_over_the_limit_is_not_counted() -> None:
    protocol, transport, _ = connect(App())
    protocol.data_received(CHUNKED)
    for _ in range(4):
        protocol.data_received(b"1000\r\n")  # a size line, then its data in pieces
        for _ in range(16):
            protocol.data_received(b"a" * 256)
        protocol.data_received(b"\r\n")
    protocol.data_received(b"0\r\n" + TRAILER)  # a read that starts trailers is not counted
    protocol.data_received(TRAILER + b"\r\n")
    assert not transport.closing
    assert protocol.cycle.more_body is False


REQUEST_ID_LINE = re.compile(rb"\r\nx-request-id: (req_[0-9a-f]{32})\r\n")


def request_id_of(answer: bytes) -> bytes:
    """The ``x-request-id`` in the head of ``answer`` (one answer's bytes)."""
    head = answer.split(b"\r\n\r\n", 1)[0] + b"\r\n"
    found = REQUEST_ID_LINE.search(head)
    assert found is not None, head
    return found.group(1)


async def test_a_431_carries_its_own_request_id() -> None:
    """Every answer carries ``x-request-id``, the guard's own 431 too: one per answer."""
    ids = set()
    for _ in range(2):
        protocol, transport, _ = connect(App())
        protocol.data_received(b"GET / HTTP/1.1\r\nX-Big: " + b"a" * 4096)
        answer = b"".join(transport.writes)
        assert answer.startswith(b"HTTP/1.1 431 ")
        ids.add(request_id_of(answer))
    assert len(ids) == 2


async def test_an_unparsable_request_is_a_400_with_a_request_id() -> None:
    """uvicorn answers a request it cannot parse itself (400, plain text), before any app
    runs: the guard's protocol gives that answer its ``x-request-id`` too."""
    protocol, transport, _ = connect(App())
    protocol.data_received(b"GARBAGE\r\n\r\n")
    answer = b"".join(transport.writes)
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert answer.endswith(b"\r\n\r\nInvalid HTTP request received.")
    request_id_of(answer)
    assert transport.closing


@pytest.mark.parametrize(
    ("sent", "status"),
    [(b"GET / HTTP/1.1\r\nX-Big: " + b"a" * 4096, b"431"), (b"GARBAGE\r\n\r\n", b"400")],
    ids=["431", "400"],  # plain ids: a bytes id's backslashes trip mutmut (docs/mutation.md)
)
async def test_an_answer_before_any_app_carries_the_servers_own_headers(
    sent: bytes, status: bytes
) -> None:
    """The headers uvicorn puts on every answer (its ``date``, kept current by the
    server) are on the 431 and the 400 too, each a header line of its own."""
    state = ServerState()
    state.default_headers = [(b"date", b"Sun, 06 Dec 2026 08:00:00 GMT"), (b"x-served", b"1")]
    protocol, transport, _ = connect(App(), server_state=state)
    protocol.data_received(sent)
    answer = b"".join(transport.writes)
    head = answer.split(b"\r\n\r\n", 1)[0].split(b"\r\n")
    assert head[0].startswith(b"HTTP/1.1 " + status + b" ")
    assert head[1:3] == [b"date: Sun, 06 Dec 2026 08:00:00 GMT", b"x-served: 1"]
    request_id_of(answer)
