"""A light HTTP/1.1 client for one keep-alive connection: asyncio protocol + httptools.

It writes a pre-built request and times the answer: total latency (request written to
last body byte) and time to first byte (to the first body chunk). No headers are kept,
nothing is decoded, so the client adds as little as it can to what it measures. It can
also leave mid-answer, as a client that goes away does: close the connection once a
body chunk holds a given marker.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

import httptools


@dataclass(frozen=True, slots=True)
class Timing:
    """One request's status and times in nanoseconds."""

    status: int
    total_ns: int
    first_byte_ns: int
    left: bool = False
    """True when the client left mid-answer (see ``leave_at``)."""


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.first_byte_ns = 0
        self.done_ns = 0
        self.status = 0
        self.keep_body = False
        self.body: list[bytes] = []
        self.keep_alive = True
        self.leave_at: bytes | None = None
        self.left = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self.keep_alive = False
        self._fail(exc or ConnectionResetError("the server closed the connection"))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.keep_alive = self.parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        if not self.first_byte_ns:
            self.first_byte_ns = time.perf_counter_ns()
        if self.keep_body:
            self.body.append(body)
        if self.leave_at is not None and self.leave_at in body:
            self.left = True
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_result(None)

    def on_message_complete(self) -> None:
        self.done_ns = time.perf_counter_ns()
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def _fail(self, exc: BaseException) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc)


class Connection:
    """One connection to ``url``'s host, re-opened when the server does not keep it alive."""

    def __init__(self, url: str, body: bytes, *, timeout: float = 30.0) -> None:
        parts = urlsplit(url)
        if parts.hostname is None or parts.port is None:
            raise ValueError(f"need a host and a port: {url}")
        self.host = parts.hostname
        self.port = parts.port
        self.timeout = timeout
        self.request = self.build_request(parts.path, body)
        self._protocol: _Protocol | None = None

    def build_request(self, path: str, body: bytes) -> bytes:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        return head.encode() + body

    async def send(
        self,
        request: bytes | None = None,
        *,
        keep_body: bool = False,
        leave_at: bytes | None = None,
    ) -> Timing:
        """Send ``request`` (the one built at construction by default); time the answer.
        With ``leave_at``, close the connection as soon as a body chunk holds it."""
        protocol = await self._connected()
        loop = asyncio.get_running_loop()
        protocol.waiter = loop.create_future()
        protocol.first_byte_ns = protocol.done_ns = protocol.status = 0
        protocol.keep_body = keep_body
        protocol.body = []
        protocol.leave_at, protocol.left = leave_at, False
        assert protocol.transport is not None
        start = time.perf_counter_ns()
        protocol.transport.write(request or self.request)
        try:
            async with asyncio.timeout(self.timeout):
                await protocol.waiter
        except BaseException:
            self.close()
            raise
        if protocol.left or not protocol.keep_alive:
            self.close()
        end = protocol.done_ns or time.perf_counter_ns()
        first = (protocol.first_byte_ns or end) - start
        return Timing(protocol.status, end - start, first, protocol.left)

    def last_body(self) -> bytes:
        return b"".join(self._protocol.body) if self._protocol is not None else b""

    async def _connected(self) -> _Protocol:
        if self._protocol is None or not self._protocol.keep_alive:
            loop = asyncio.get_running_loop()
            _, protocol = await loop.create_connection(_Protocol, self.host, self.port)
            self._protocol = protocol
        return self._protocol

    def close(self) -> None:
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.close()
            self._protocol.keep_alive = False
