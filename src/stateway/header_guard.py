"""Bounding a request's header block in size and in time, under uvicorn's httptools
protocol (which bounds neither: llhttp buffers a header block of any size, and uvicorn's
keep-alive timeout runs only between requests, after a response).

A request's headers are incomplete from its first byte (from the connection's start, for
its first request) until uvicorn has parsed them, which it marks by starting that
request's cycle (``cycle.scope is scope``). That state is read from uvicorn's, not kept by
hooking its parser callbacks (but for a chunk's, which only a chunked body calls), so that
a request pays for nothing but a wrapper around ``data_received``.

- Size: a read that leaves a request's headers incomplete is counted; past ``max_bytes``
  the request is answered 431 and the connection closed, once the client has read the
  answer (it lingers: see ``_linger``). A read that completes a header
  block is not counted (the body after it, in the same read, is not the header block's),
  so the block held is at most ``max_bytes`` and one read. A request pipelined behind a
  response in flight is answered after that response (a 431 then would cut into it):
  nothing more is read until then.
- Trailers: a chunked body's trailer section (fields after its last chunk, which uvicorn
  appends to the request's headers) is bounded alike, by ``max_bytes`` counted apart from
  the header block's, as Go bounds it apart (by its read buffer, 4 KiB). Too large, it is
  answered 431 if no response to it has begun (one queued behind responses in flight is
  answered after them, as its header block would be), else the connection is just
  closed. The parser says when a chunk begins and ends (only for a chunked body); a read
  inside one that adds nothing to the body is the trailer section's. Once the response is
  complete (answered before its body was read: a 401, a 413), uvicorn drops the body
  unread, so a chunk's data and a trailer section look alike: each chunk may then send up
  to ``max_drain_bytes`` (``[server] max_body_bytes``), so that a client sending its
  whole body before it reads (most do) gets the answer, not a reset. So a request without
  a chunked body pays for one more test per read, nothing per chunk. Its time is the
  body's (``[server] request_body_timeout``) while the app reads it; after an early
  answer, ``timeout``'s (below).
- Time: one sweep per server, every second or so while connections are open, closes
  those whose headers have been incomplete for longer than ``timeout`` (the first
  request's since the connection was made, a later one's since the first sweep that saw
  it begun: a second at most after its first byte) without answering, as nginx
  (``client_header_timeout``) and Go's ``ReadHeaderTimeout`` do; and those still sending
  the body of a request answered before it was read, ``timeout`` after a sweep first saw
  it so (nginx's ``lingering_time``: else a client trickling bytes holds the connection
  for ever, uvicorn's keep-alive timer restarting at each). A connection idle between
  requests is uvicorn's keep-alive timeout's to close, and one with a response in flight
  (a request pipelined behind it) is never swept.
- Sends: the same sweep drops a connection whose client took none of the output waiting
  for it for ``send_timeout`` (:mod:`stateway.send_guard`); WebSocket connections
  (upgraded from this protocol, in the server's set of connections) included.

- Counted: an answer written before any app runs (a 431 above, uvicorn's 400 for a
  request it cannot parse) is counted as a request (:class:`RefusedRequests`, the
  metrics), as the app's observer counts the others; a request whose app runs (its
  trailers refused as it reads the body) is left to the app's.

Nothing is scheduled per request or per connection.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Set
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)

from stateway.send_guard import SendGuarded
from stateway.surfaces.http.observed import new_request_id

if TYPE_CHECKING:
    from uvicorn._types import ASGIReceiveCallable, ASGISendCallable, Scope

SWEEP_INTERVAL = 1.0
"""Seconds between sweeps, at most (a shorter timeout is swept four times as often)."""

_TOO_LARGE = b"Request header fields too large."


class RefusedRequests(Protocol):
    """Where an answer written before any app runs is counted (the metrics): the app's
    observer (``surfaces/http/observed.py``) never sees those requests."""

    def request_refused(self, status: int) -> None: ...


def _plain_answer(status: int, default_headers: list[tuple[bytes, bytes]], body: bytes) -> bytes:
    """An answer written before any app runs (a 431, uvicorn's 400 for a request it cannot
    parse): plain text, the connection to be closed, and its own ``x-request-id``, as
    every answer has (``surfaces/http/observed.py`` gives the app's theirs)."""
    head = [STATUS_LINE[status]]
    for name, value in default_headers:
        head.extend([name, b": ", value, b"\r\n"])
    head.append(
        b"x-request-id: %s\r\ncontent-type: text/plain; charset=utf-8\r\n"
        b"content-length: %d\r\nconnection: close\r\n\r\n"
        % (new_request_id().encode("ascii"), len(body))
    )
    return b"".join(head) + body


@dataclass(frozen=True, slots=True)
class HeaderLimits:
    max_bytes: int = 64 * 1024
    """The largest header block (request line included); 431 beyond."""
    timeout: float = 30.0
    """Seconds a request's header block may take to arrive; closed after."""
    max_drain_bytes: int = 32 * 1024 * 1024
    """What one chunk (or the trailer section) of a body answered before it was read may
    send before the connection is closed: the largest body served (``max_body_bytes``)."""

    @property
    def sweep_interval(self) -> float:
        return min(SWEEP_INTERVAL, self.timeout / 4)


DEFAULT_HEADER_LIMITS = HeaderLimits()


class HeaderSweep:
    """The one periodic sweep of a server's connections: it runs while any is open. Given
    ``send_timeout``, it also drops those whose client stopped reading."""

    def __init__(self, limits: HeaderLimits, send_timeout: float | None = None) -> None:
        self.limits = limits
        self.send_timeout = send_timeout
        self._interval = limits.sweep_interval
        if send_timeout is not None:
            self._interval = min(self._interval, send_timeout / 4)
        self._next: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def watch(self, loop: asyncio.AbstractEventLoop, connections: Set[Any]) -> None:
        """Called as a connection opens: starts sweeping ``connections`` (uvicorn's set
        of the server's open connections) unless the sweep is running."""
        if self._next is None or self._loop is not loop:  # (a config served again)
            self._loop = loop
            self._next = loop.call_later(self._interval, self._sweep, loop, connections)

    def _sweep(self, loop: asyncio.AbstractEventLoop, connections: Set[Any]) -> None:
        self._next = None
        if not connections:
            return  # the next connection starts it again
        now = time.monotonic()
        send_timeout = self.send_timeout
        for connection in list(connections):
            if isinstance(connection, HeaderGuardedProtocol):
                connection.close_if_stalled(now, self.limits.timeout)
            if send_timeout is not None and isinstance(connection, SendGuarded):
                connection.abort_if_unread(now, send_timeout)
        self.watch(loop, connections)


class _DroppingParser:
    """A parser for a connection that will be closed: it drops what it is fed."""

    def feed_data(self, data: bytes) -> None:
        pass


_DROPPING = _DroppingParser()


class HeaderGuardedProtocol(SendGuarded, HttpToolsProtocol):
    """uvicorn's httptools protocol with its header block bounded (see the module), and
    its sends (:class:`SendGuarded`)."""

    sweep: HeaderSweep
    """The server's sweep (and limits): set on the subclass :func:`guarded_http` makes."""
    refused: RefusedRequests | None = None
    """Counts the 431s and 400s answered before any app runs (set alike)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._connected_at = 0.0
        self._header_bytes = 0
        self._counted: object = None
        """The request whose header bytes are counted (its scope)."""
        self._stalled: object = None
        """The request the sweep last saw with its headers incomplete (its scope)."""
        self._stalled_since = 0.0
        self._in_chunk = False
        """Between a chunk's size line and its end: its data, or the last's trailer section."""
        self._trailer_bytes = 0
        self._refused = False
        """A request's headers overflowed behind a response in flight: answered after it."""
        self._lingering = False
        """Answered 431, the write side shut: what comes is dropped (read as a chunk is)."""
        self._lingering_since = 0.0
        self._dropped = 0

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request it cannot parse, with an ``x-request-id``."""
        answer = _plain_answer(400, self.server_state.default_headers, msg.encode("ascii"))
        self.transport.write(answer)
        self.transport.close()
        self._count_refused(400)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._connected_at = time.monotonic()
        self.sweep.watch(self.loop, self.connections)

    def data_received(self, data: bytes) -> None:
        if self._in_chunk:
            self._data_received_in_chunk(data)
            return
        cycle: RequestResponseCycle | None = self.cycle
        HttpToolsProtocol.data_received(self, data)
        if self.cycle is cycle and (cycle is None or cycle.scope is not self.scope):
            # a request's headers, begun and not completed by this read: all of it theirs
            if self._counted is not self.scope:
                self._counted = self.scope
                self._header_bytes = 0
            self._header_bytes += len(data)
            if self._header_bytes > self.sweep.limits.max_bytes:
                self._refuse_headers()

    def _data_received_in_chunk(self, data: bytes) -> None:
        """A read begun inside a chunk (a chunked body's reads: all but its first).

        A read that leaves the chunk it began in still open and adds nothing to the body
        is the last chunk's trailer section (or a chunk's size line and its end): counted,
        as a header block's reads are. Once the response is complete the body does not
        grow (uvicorn drops a body no one will read), so every read inside one chunk
        counts, against ``max_drain_bytes``: a chunk longer closes the connection, sparing
        a body that would be dropped (Go stops reading one after 256 KiB).
        """
        if self._lingering:
            self._dropped += len(data)
            if self._dropped > self.sweep.limits.max_drain_bytes:
                self.transport.close()
            return
        cycle: RequestResponseCycle = self.cycle
        held = len(cycle.body)
        HttpToolsProtocol.data_received(self, data)
        if self._in_chunk and self.cycle is cycle and len(cycle.body) == held:
            self._trailer_bytes += len(data)
            limits = self.sweep.limits
            if self._trailer_bytes > (
                limits.max_drain_bytes if cycle.response_complete else limits.max_bytes
            ):
                if self.pipeline:  # queued behind a response in flight: 431 after it
                    self._refuse_trailers_after_responses()
                else:  # 431 unless its response has begun
                    self._refuse(answer=not cycle.response_started)

    def on_chunk_header(self) -> None:
        """Called by the parser (chunked bodies only) at a chunk's size line."""
        self._in_chunk = True
        self._trailer_bytes = 0

    def on_chunk_complete(self) -> None:
        """Called by the parser at a chunk's end (the last's: after its trailer section)."""
        self._in_chunk = False

    def close_if_stalled(self, now: float, timeout: float) -> None:
        """Close the connection if a request's headers have been incomplete for longer
        than ``timeout``: the first request's since the connection was made, a later
        one's since a sweep first saw it (its first byte came after the last sweep). So
        too a body still coming after its request was answered (answered before it was
        read: a 401, a 404), which uvicorn drains for as long as bytes trickle in: at most
        ``timeout`` from the sweep that first saw it, as nginx's ``lingering_time``; and a
        connection lingering after a 431, ``timeout`` after the answer."""
        cycle: RequestResponseCycle | None = self.cycle  # None until a request's headers
        if self._lingering:
            since = self._lingering_since
        elif cycle is None:  # no request's headers complete yet
            since = self._connected_at
        elif cycle.scope is self.scope and not (cycle.response_complete and cycle.more_body):
            return  # a request in flight, or none begun since (keep-alive's to close)
        elif not cycle.response_complete:
            return  # a request pipelined behind a response in flight
        elif self._stalled is not self.scope:
            self._stalled = self.scope
            self._stalled_since = now
            return
        else:
            since = self._stalled_since
        if now - since > timeout and not self.transport.is_closing():
            self.transport.close()

    def shutdown(self) -> None:
        """At the server's shutdown: a lingering connection is closed at once (its answer
        is sent), though a request whose trailers were refused is still in flight to
        uvicorn, which would wait for the client or the sweep to end it."""
        if self._lingering:
            self.transport.close()
        else:
            super().shutdown()

    def _refuse_headers(self) -> None:
        cycle: RequestResponseCycle | None = self.cycle
        if cycle is None or cycle.response_complete:
            self._refuse(answer=True, unseen=True)
        elif not self._refused and not self.transport.is_closing():
            # Pipelined behind a response in flight (the last request whose headers
            # completed): answered after it, reading nothing more until then (what
            # comes anyway, the app's ``receive`` resuming reading, is dropped).
            self._refused = True
            self.flow.pause_reading()
            self.parser = _DROPPING  # type: ignore[assignment]
            cycle.on_response = self._refuse_after_response

    def _refuse_after_response(self) -> None:
        """The response before the refused request complete: in place of uvicorn's
        ``on_response_complete``, which would start reading (and the next request)."""
        self.server_state.total_requests += 1
        self._refuse(answer=True, unseen=True)

    def _refuse_trailers_after_responses(self) -> None:
        """A request queued behind a response in flight (pipelined: ``self.cycle``, the
        pipeline's newest) overflowed its trailer section: it is answered 431 once the
        responses before it are complete, then the connection closed once the client
        has read it (it lingers, as after any 431: see ``_linger``).

        Closing at once would cut the response in flight. 431 rather than a bare close,
        though the request's body has begun: no response to it has, and a trailer section
        is header fields (RFC 9110, 6.5) too large. h11 does the same (it reads a
        pipelined request only once the response before it is complete, and hints 431
        for a trailer section too long as for a header block); nginx too reads a
        pipelined request only then, and answers its body's errors when no response has
        begun. The request's app is never run: in its place in the pipeline,
        :meth:`_answer_in_turn`, and the request is ended as by a disconnect (so that
        uvicorn answers it nothing itself, if the connection closes before its turn).
        Nothing more is read until then (what comes anyway is dropped).
        """
        cycle, _ = self.pipeline[0]
        cycle.disconnected = True
        self._in_chunk = False  # (what is dropped is not counted)
        self.flow.pause_reading()
        self.parser = _DROPPING  # type: ignore[assignment]
        self.pipeline[0] = (cycle, self._answer_in_turn)

    async def _answer_in_turn(
        self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        """The app run in its turn for a request refused in the pipeline: the 431 written
        as any other is, and the connection lingers (through uvicorn's ``send``, the
        answer's ``connection: close`` would close it at once)."""
        self._refuse(answer=True, unseen=True)

    def _refuse(self, *, answer: bool, unseen: bool = False) -> None:
        """Close the connection, first answering 431 if ``answer``, counted if ``unseen``
        (no app runs for the request: one that does counts it when it ends)."""
        if self.transport.is_closing() or self not in self.connections:
            return  # closed, or handed to the WebSocket protocol
        if answer:
            answered = _plain_answer(431, self.server_state.default_headers, _TOO_LARGE)
            self.transport.write(answered)
            if unseen:
                self._count_refused(431)
            if self.transport.can_write_eof():
                self._linger()
                return
        self.transport.close()

    def _count_refused(self, status: int) -> None:
        if self.refused is not None:
            self.refused.request_refused(status)

    def _linger(self) -> None:
        """Close the connection once the client has read the 431, not at once: a client
        sends its whole request before it reads, and a close with its bytes unread resets
        the connection, failing its writes and losing the answer. So, as nginx's
        ``lingering_close``, the write side is shut (the answer ends with it) and what
        comes is read and dropped until the client closes (uvicorn closes on its end of
        file), sends over ``max_drain_bytes``, or ``timeout`` passes (the sweep). The
        reads go where a chunk's do: nothing is added to a read of headers. A request
        whose trailers were refused is ended for its app as by a disconnect (what it
        would send is not written, nor the ``100 Continue`` its first read would: a write
        after the write side is shut raises)."""
        cycle: RequestResponseCycle | None = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True
            cycle.waiting_for_100_continue = False
            cycle.message_event.set()
        self._lingering = True
        self._lingering_since = time.monotonic()
        self._in_chunk = True
        self.parser = _DROPPING  # type: ignore[assignment]
        self.flow.resume_reading()
        self.transport.write_eof()


def guarded_http(
    limits: HeaderLimits,
    send_timeout: float | None = None,
    refused: RefusedRequests | None = None,
) -> type[HeaderGuardedProtocol]:
    """The protocol class for one server (uvicorn's ``Config(http=...)``): its own
    subclass, holding that server's sweep (which drops a connection whose client stopped
    reading, given ``send_timeout``) and where its refusals are counted (``refused``)."""

    class ServerHeaderGuardedProtocol(HeaderGuardedProtocol):
        sweep = HeaderSweep(limits, send_timeout)

    ServerHeaderGuardedProtocol.refused = refused

    return ServerHeaderGuardedProtocol
