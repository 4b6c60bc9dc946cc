"""The request header block's bounds through the real ``stateway serve``, on raw sockets:
its size (``max_header_bytes``: 431, then closed) and the time to send it
(``header_timeout``: closed), leaving bodies and idle keep-alive connections alone."""

from __future__ import annotations

import re
import select
import socket
import time
import urllib.request
from collections.abc import Iterator
from urllib.parse import urlsplit

import orjson
import pytest

from stateway.launch import start_gateway

MAX_HEADER_BYTES = 2048
KEEP_ALIVE = 2
"""Seconds an idle connection stays open here (``[server] keep_alive_timeout``)."""
WAIT = 30.0
"""Seconds a socket waits for what the server must do; only a failing test waits this long."""


@pytest.fixture(scope="module")
def gateway(fake_upstream: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    database = f"sqlite:///{tmp_path_factory.mktemp('headers') / 'stateway.db'}"
    env = {
        "STATEWAY_MAX_HEADER_BYTES": str(MAX_HEADER_BYTES),
        "STATEWAY_HEADER_TIMEOUT": "0.5",
        "STATEWAY_KEEP_ALIVE_TIMEOUT": str(KEEP_ALIVE),
    }
    with start_gateway(["--upstream", fake_upstream, "--database", database], env=env) as url:
        yield url


def connect(gateway: str) -> socket.socket:
    address = urlsplit(gateway)
    assert address.hostname is not None
    assert address.port is not None
    return socket.create_connection((address.hostname, address.port), timeout=WAIT)


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a timeout fails)."""
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def read_response(sock: socket.socket) -> bytes:
    """One response to a ``GET /health`` (its body is small and sized)."""
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = sock.recv(65536)
        assert chunk, "closed before a response"
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += sock.recv(65536)
    return head


HEALTH = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
EXPECT = b"Expect: 100-continue\r\n"
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"

OVER_THE_LIMIT = 4 * (b"X-Big: " + b"a" * (MAX_HEADER_BYTES // 2) + b"\r\n")
"""Fields over the limit, sent in one write after a ``read_continue``: read whole, so the
server closes with nothing unread (else its close resets the connection, which may lose
its answer, or fail the client's next write)."""


def read_continue(sock: socket.socket) -> None:
    """Read the ``100 Continue`` to a request sent with ``EXPECT``, not a byte more.
    uvicorn sends it as the app first reads the body: once the read that completed the
    request's header block is parsed whole. A write this small arrives whole on loopback:
    that read held all of it, and what is sent next is read apart from it (no sleep)."""
    received = b""
    while len(received) < len(CONTINUE):
        chunk = sock.recv(len(CONTINUE) - len(received))
        assert chunk, "closed before a 100 Continue"
        received += chunk
    assert received == CONTINUE


def test_a_header_block_over_the_limit_is_answered_431_and_closed(gateway: str) -> None:
    with connect(gateway) as sock:
        sock.sendall(
            b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * (4 * MAX_HEADER_BYTES)
        )
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 431 ")
    assert b"connection: close" in answer.lower()
    assert re.search(rb"\r\nx-request-id: req_[0-9a-f]{32}\r\n", answer)


def test_a_request_that_does_not_parse_is_a_400_with_a_request_id(gateway: str) -> None:
    with connect(gateway) as sock:
        sock.sendall(b"GARBAGE\r\n\r\n")
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert re.search(rb"\r\nx-request-id: req_[0-9a-f]{32}\r\n", answer)


def refused(gateway: str, status: int) -> float:
    """``stateway_requests_total`` of requests refused with ``status`` before routing."""
    with urllib.request.urlopen(gateway + "/metrics", timeout=WAIT) as reply:
        text = reply.read().decode()
    line = f'stateway_requests_total{{route="unmatched",status="{status}"}} '
    return sum(float(found[len(line) :]) for found in text.splitlines() if found.startswith(line))


def test_answers_before_any_app_are_counted_in_the_metrics(gateway: str) -> None:
    """The 431 and the 400 are written by the server, never reaching the app: counted all
    the same, under ``route="unmatched"``."""
    before = refused(gateway, 431), refused(gateway, 400)
    with connect(gateway) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nX-Big: " + b"a" * (4 * MAX_HEADER_BYTES))
        assert read_until_closed(sock).startswith(b"HTTP/1.1 431 ")
    with connect(gateway) as sock:
        sock.sendall(b"GARBAGE\r\n\r\n")
        assert read_until_closed(sock).startswith(b"HTTP/1.1 400 ")
    assert (refused(gateway, 431), refused(gateway, 400)) == (before[0] + 1, before[1] + 1)


def test_a_client_still_sending_its_header_block_reads_the_431_not_a_reset(
    gateway: str,
) -> None:
    """The server answers once the limit is passed, while the client still writes (as a
    client sends its whole request before it reads). Closed at once with bytes unread,
    the connection is reset: the client's writes fail and the 431 is lost. It lingers
    instead (its write side shut, what comes read and dropped) until the client closes."""
    with connect(gateway) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        field = b"X-Big: " + b"a" * 8192 + b"\r\n"
        for _ in range(128):  # 1 MiB, far past what the server read before it answered
            sock.sendall(field)
        sock.shutdown(socket.SHUT_WR)
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 431 ")


def test_a_header_block_over_the_limit_on_a_kept_alive_connection_is_431(gateway: str) -> None:
    with connect(gateway) as sock:
        sock.sendall(HEALTH)
        assert read_response(sock).startswith(b"HTTP/1.1 200 ")
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        for _ in range(4):  # in pieces: the limit counts what has come, whatever the reads
            sock.sendall(b"X-Big: " + b"a" * (MAX_HEADER_BYTES // 2) + b"\r\n")
        assert read_until_closed(sock).startswith(b"HTTP/1.1 431 ")


def test_a_header_block_under_the_limit_is_served(gateway: str) -> None:
    filler = b"X-Filler: " + b"a" * (MAX_HEADER_BYTES - 200) + b"\r\n"
    with connect(gateway) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + filler + b"\r\n")
        assert read_response(sock).startswith(b"HTTP/1.1 200 ")


def test_a_body_far_over_the_header_limit_is_not_counted(gateway: str) -> None:
    """Sent with its headers in one write (http.client does so), so the server's first
    reads hold both: only the header block counts."""
    text = "x" * (64 * MAX_HEADER_BYTES)
    body = orjson.dumps({"model": "fake-model", "input": text, "store": False})
    request = urllib.request.Request(
        gateway + "/v1/responses", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=WAIT) as response:
        assert response.status == 200
        assert orjson.loads(response.read())["status"] == "completed"


@pytest.mark.parametrize("sent", [b"", b"GET /hea", b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"])
def test_a_connection_that_does_not_finish_its_headers_in_time_is_closed(
    gateway: str, sent: bytes
) -> None:
    with connect(gateway) as sock:
        sock.sendall(sent)
        assert read_until_closed(sock) == b""  # closed, nothing answered


def test_an_idle_kept_alive_connection_is_left_to_the_keep_alive_timeout(gateway: str) -> None:
    with connect(gateway) as kept:
        kept.sendall(HEALTH)
        assert read_response(kept).startswith(b"HTTP/1.1 200 ")
        # A connection opened after `kept` went idle, closed by the header timeout: the
        # sweeps that closed it have passed over `kept`, idle longer.
        with connect(gateway) as stalled:
            stalled.sendall(b"GET /hea")
            assert read_until_closed(stalled) == b""
        kept.sendall(HEALTH)
        assert read_response(kept).startswith(b"HTTP/1.1 200 ")
        assert read_until_closed(kept) == b""  # the keep-alive timeout ends it


def test_an_idle_connection_is_closed_after_the_configured_keep_alive_timeout(
    gateway: str,
) -> None:
    """Not uvicorn's 5 s: by then a connection idle ``KEEP_ALIVE`` seconds (and a margin)
    is closed already."""
    with connect(gateway) as idle:
        idle.sendall(HEALTH)
        assert read_response(idle).startswith(b"HTTP/1.1 200 ")
        time.sleep(KEEP_ALIVE + 1.5)
        readable, _, _ = select.select([idle], [], [], 0)
        assert readable, "still open past the keep-alive timeout"
        assert idle.recv(1) == b""


def chunked_post(path: bytes, body: bytes, *, expect: bool = False) -> bytes:
    """A ``POST`` of ``body`` in one chunk, up to its last chunk: its trailer section next
    (``expect``: asking for a ``100 Continue``)."""
    head = b"POST " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n" + (EXPECT if expect else b"")
    head += b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    return head + b"%x\r\n" % len(body) + body + b"\r\n0\r\n"


CREATE = orjson.dumps({"model": "fake-model", "input": "hi", "store": False})


def test_a_trailer_section_over_the_limit_is_answered_431_and_closed(gateway: str) -> None:
    with connect(gateway) as sock:
        sock.sendall(chunked_post(b"/v1/responses", CREATE, expect=True))
        read_continue(sock)  # read: the trailers counted (a read that starts them is not)
        sock.sendall(OVER_THE_LIMIT)  # the answer waits for the trailers' end
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 431 ")


def test_a_chunked_body_answered_before_it_was_read_is_drained_not_reset(
    gateway: str,
) -> None:
    """An unknown route answers without reading the body: the rest of it (one chunk, far
    over ``max_header_bytes``) is drained, not refused, and the connection serves the next
    request."""
    size = 64 * MAX_HEADER_BYTES
    with connect(gateway) as sock:
        head = chunked_post(b"/v1/unknown", b"")
        sock.sendall(head[: head.index(b"\r\n\r\n") + 4] + b"%x\r\n" % size)
        assert read_response(sock).startswith(b"HTTP/1.1 404 ")
        for _ in range(size // 4096):  # the chunk's data, read after the answer
            sock.sendall(b"a" * 4096)
        sock.sendall(b"\r\n0\r\n\r\n" + HEALTH)
        assert read_response(sock).startswith(b"HTTP/1.1 200 ")


def test_a_body_trickled_after_its_answer_is_cut_off_after_the_header_timeout(
    gateway: str,
) -> None:
    """Each byte would restart uvicorn's keep-alive timer: the sweep closes the connection
    ``header_timeout`` (0.5 s here) after it first saw it draining, as nginx's
    ``lingering_time`` does."""
    with connect(gateway) as sock:
        head = chunked_post(b"/v1/unknown", b"")
        sock.sendall(head[: head.index(b"\r\n\r\n") + 4] + b"1000\r\n")
        assert read_response(sock).startswith(b"HTTP/1.1 404 ")
        began = time.monotonic()
        closed = False
        while not closed and time.monotonic() - began < WAIT:
            try:
                sock.sendall(b"a")
            except OSError:
                closed = True
            readable, _, _ = select.select([sock], [], [], 0.1)  # a byte each 0.1 s at most
            if readable:
                try:
                    closed = sock.recv(1) == b""
                except OSError:
                    closed = True
        assert closed
        assert time.monotonic() - began < 5  # the sweep's (0.5 s, swept each 0.125 s)


def test_a_trailer_section_under_the_limit_is_served(gateway: str) -> None:
    trailer = b"X-Filler: " + b"a" * (MAX_HEADER_BYTES - 200) + b"\r\n"
    with connect(gateway) as sock:
        sock.sendall(chunked_post(b"/v1/responses", CREATE))
        sock.sendall(trailer + b"\r\n")
        assert read_response(sock).startswith(b"HTTP/1.1 200 ")


STALLED = orjson.dumps({"model": "fake-model", "input": "[[stall:1000]] hi", "store": False})
LATE = b"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\n" + EXPECT
LATE += b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(STALLED) + STALLED
"""A request whose answer is a second late, asking for a ``100 Continue``."""


def test_a_pipelined_header_block_over_the_limit_is_431_after_the_answer_before_it(
    gateway: str,
) -> None:
    """The first request's answer is a second late: the second's headers overflow while
    it is in flight, and are answered once it is complete."""
    with connect(gateway) as sock:
        sock.sendall(LATE + b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        read_continue(sock)  # read: the rest counted (a read that completes a header block is not)
        sock.sendall(OVER_THE_LIMIT)
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert b'"completed"' in answer
    assert answer.index(b'"completed"') < answer.index(b"HTTP/1.1 431 ")


def test_a_pipelined_trailer_section_over_the_limit_is_431_after_the_answer_before_it(
    gateway: str,
) -> None:
    """The first request's answer is a second late: the second's trailer section (read as
    the first's app reads its body) overflows while it is in flight, and is answered once
    it is complete, not by cutting it."""
    with connect(gateway) as sock:
        sock.sendall(LATE + chunked_post(b"/v1/responses", CREATE))
        read_continue(sock)  # read: the trailers counted (a read that starts them is not)
        sock.sendall(OVER_THE_LIMIT)
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert b'"completed"' in answer
    assert answer.index(b'"completed"') < answer.index(b"HTTP/1.1 431 ")
    assert answer.count(b"HTTP/1.1 ") == 2  # the second request is not served


def test_a_client_still_sending_a_pipelined_trailer_section_reads_the_431_not_a_reset(
    gateway: str,
) -> None:
    """The second request's trailer section overflows while the first's answer is a second
    late, and the client goes on writing it, a field each 10 ms, reading what comes, until
    the 431 is read; then it writes more (1 MiB) before it closes. Closed at once after the
    431, with bytes unread or still coming, the connection is reset: the client's writes
    fail (a client that sends its whole request before it reads loses the answers). It
    lingers instead, as after any 431, until the client closes."""
    field = b"X-Big: " + b"a" * (64 * 1024) + b"\r\n"
    answer = b""
    with connect(gateway) as sock:
        sock.sendall(LATE + chunked_post(b"/v1/responses", CREATE))
        read_continue(sock)  # read: the trailers counted (a read that starts them is not)
        began = time.monotonic()
        while not answer.endswith(b"Request header fields too large."):
            assert time.monotonic() - began < WAIT, "no 431"
            if select.select([sock], [], [], 0.01)[0]:
                chunk = sock.recv(65536)
                assert chunk, "closed before a 431"
                answer += chunk
            sock.sendall(field)
        for _ in range(16):
            sock.sendall(field)
        sock.shutdown(socket.SHUT_WR)
        assert read_until_closed(sock) == b""
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert answer.index(b'"completed"') < answer.index(b"HTTP/1.1 431 ")
