"""Bounding a request's header block in size and in time, under uvicorn's httptools
protocol (which bounds neither: llhttp buffers a header block of any size, and uvicorn's
keep-alive timeout runs only between requests, after a response).

- Size: while a request's headers are incomplete (from the connection's start, or from a
  request's first byte, until its headers are parsed), the bytes read are counted; past
  ``max_bytes`` the request is answered 431 and the connection closed. A read that
  completes a header block is not counted (the body after it, in the same read, is not
  the header block's), so the block held is at most ``max_bytes`` and one read.
- Time: one sweep per server, every second or so while connections are open, closes
  those whose headers have been incomplete for longer than ``timeout`` (counted from the
  connection's start for its first request, from a request's first byte after that),
  without answering, as nginx (``client_header_timeout``) and Go's ``ReadHeaderTimeout``
  do. A connection idle between requests is uvicorn's keep-alive timeout's to close, and
  one with a response in flight is never swept.

Nothing is scheduled per request or per connection: a request pays for a clock read and
a few attribute writes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Set
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

SWEEP_INTERVAL = 1.0
"""Seconds between sweeps, at most (a shorter timeout is swept four times as often)."""

_TOO_LARGE = b"Request header fields too large."


@dataclass(frozen=True, slots=True)
class HeaderLimits:
    max_bytes: int = 64 * 1024
    """The largest header block (request line included); 431 beyond."""
    timeout: float = 30.0
    """Seconds a request's header block may take to arrive; closed after."""

    @property
    def sweep_interval(self) -> float:
        return min(SWEEP_INTERVAL, self.timeout / 4)


DEFAULT_HEADER_LIMITS = HeaderLimits()


class HeaderSweep:
    """The one periodic sweep of a server's connections: it runs while any is open."""

    def __init__(self, limits: HeaderLimits) -> None:
        self.limits = limits
        self._next: asyncio.TimerHandle | None = None

    def watch(self, loop: asyncio.AbstractEventLoop, connections: Set[Any]) -> None:
        """Called as a connection opens: starts sweeping ``connections`` (uvicorn's set
        of the server's open connections) unless the sweep is running."""
        if self._next is None:
            self._next = loop.call_later(self.limits.sweep_interval, self._sweep, loop, connections)

    def _sweep(self, loop: asyncio.AbstractEventLoop, connections: Set[Any]) -> None:
        self._next = None
        if not connections:
            return  # the next connection starts it again
        deadline = time.monotonic() - self.limits.timeout
        for connection in list(connections):
            if isinstance(connection, HeaderGuardedProtocol):
                connection.close_if_stalled(deadline)
        self.watch(loop, connections)


class HeaderGuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with its header block bounded (see the module)."""

    sweep: HeaderSweep
    """The server's sweep (and limits): set on the subclass :func:`guarded_http` makes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._awaiting_headers = True
        self._headers_since = 0.0  # set as the connection is made
        self._header_bytes = 0
        self._headers_parsed = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._headers_since = time.monotonic()
        self.sweep.watch(self.loop, self.connections)

    def data_received(self, data: bytes) -> None:
        parsed = self._headers_parsed
        super().data_received(data)
        if self._awaiting_headers and self._headers_parsed == parsed:
            self._header_bytes += len(data)
            if self._header_bytes > self.sweep.limits.max_bytes:
                self._refuse_headers()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if not self._awaiting_headers:  # a later request: the first's counts from the start
            self._awaiting_headers = True
            self._headers_since = time.monotonic()

    def on_headers_complete(self) -> None:
        self._awaiting_headers = False
        self._header_bytes = 0
        self._headers_parsed += 1
        super().on_headers_complete()

    def close_if_stalled(self, deadline: float) -> None:
        """Close the connection if its headers began before ``deadline`` and are still
        incomplete, unless a response is in flight (a request pipelined behind it)."""
        if (
            self._awaiting_headers
            and self._headers_since < deadline
            and not self._responding()
            and not self.transport.is_closing()
        ):
            self.transport.close()

    def _responding(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _refuse_headers(self) -> None:
        if self.transport.is_closing():
            return
        self._awaiting_headers = False
        if not self._responding():  # answering now would cut into a response
            head = [STATUS_LINE[431]]
            for name, value in self.server_state.default_headers:
                head.extend([name, b": ", value, b"\r\n"])
            head.append(
                b"content-type: text/plain; charset=utf-8\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n" % len(_TOO_LARGE)
            )
            self.transport.write(b"".join(head) + _TOO_LARGE)
        self.transport.close()


def guarded_http(limits: HeaderLimits) -> type[HeaderGuardedProtocol]:
    """The protocol class for one server (uvicorn's ``Config(http=...)``): its own
    subclass, holding that server's sweep."""

    class ServerHeaderGuardedProtocol(HeaderGuardedProtocol):
        sweep = HeaderSweep(limits)

    return ServerHeaderGuardedProtocol
