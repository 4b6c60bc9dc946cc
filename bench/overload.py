"""Overload: many concurrent streams against one gateway process, behind a slow upstream.

Every stream is opened at once (store:true, a fake model that streams slowly), far more
than the backend's connection pool and the gateway's queue (``[server]
max_queued_requests``) hold. Each stream then ends one way:

* **completed**: HTTP 200 and ``response.completed``;
* **refused**: HTTP 503 with error code ``overloaded``, before the stream started;
* **failed mid-way**: HTTP 200, then ``response.failed`` or a stream cut before its
  terminal event (the late failure admission control exists to prevent);
* **other**: anything else, including streams not finished within the time bound.

The gateway's peak resident set (``VmHWM``) is read at the end. The client is one process
of asyncio protocols parsing with httptools; it keeps no bodies, only the outcome.
"""

from __future__ import annotations

import asyncio
import resource
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import cast
from urllib.parse import urlsplit

import httptools
import orjson
import uvloop

from bench.procfs import rss_mib
from bench.scenarios import RESPONSES_PATH, responses_body

SLOW_INPUT = "[[slow:50]] [[words:20]] hello"
"""A stream of 21 chunks, 50 ms apart: about a second of upstream time per stream."""
_TERMINAL = (b"event: response.completed", b"event: response.failed", b"event: response.incomplete")
_TAIL = 64
"""Bytes of the previous body chunk kept, so a marker split across chunks is still seen."""
COMPLETED, REFUSED, FAILED_MIDWAY, OTHER = "completed", "refused", "failed mid-way", "other"


@dataclass(frozen=True, slots=True)
class OverloadStats:
    streams: int
    completed: int
    refused: int
    failed_midway: int
    other: int
    other_reasons: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    """From the first connection attempt until every stream ended or the bound passed."""
    bound_seconds: float = 0.0
    rss_start_mib: float = 0.0
    peak_rss_mib: float = 0.0
    """The gateway's VmHWM: its largest resident set since it started."""
    upstream_input: str = SLOW_INPUT


def raise_fd_limit(wanted: int) -> int:
    """Raise this process's open-file limit towards ``wanted`` (children inherit it);
    return the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


def measure_overload(pid: int, base_url: str, *, streams: int, bound: float) -> OverloadStats:
    """Open ``streams`` concurrent streams to the gateway at ``base_url`` (``pid``); wait
    at most ``bound`` seconds for all of them to end."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_measure(pid, base_url, streams, bound))


async def _measure(pid: int, base_url: str, streams: int, bound: float) -> OverloadStats:
    parts = urlsplit(base_url)
    assert parts.hostname is not None
    assert parts.port is not None
    body = responses_body(True, store=True, text=SLOW_INPUT)
    request = (
        f"POST {RESPONSES_PATH} HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body
    start_rss = rss_mib(pid)
    loop = asyncio.get_running_loop()
    began = time.monotonic()
    deadline = loop.time() + bound
    outcomes = await asyncio.gather(
        *(_stream(parts.hostname, parts.port, request, deadline) for _ in range(streams))
    )
    seconds = time.monotonic() - began
    kinds = Counter(kind for kind, _ in outcomes)
    reasons = Counter(reason for kind, reason in outcomes if kind == OTHER)
    return OverloadStats(
        streams=streams,
        completed=kinds[COMPLETED],
        refused=kinds[REFUSED],
        failed_midway=kinds[FAILED_MIDWAY],
        other=kinds[OTHER],
        other_reasons=dict(reasons.most_common()),
        seconds=round(seconds, 2),
        bound_seconds=bound,
        rss_start_mib=round(start_rss, 2),
        peak_rss_mib=round(rss_mib(pid, "VmHWM"), 2),
    )


async def _stream(host: str, port: int, request: bytes, deadline: float) -> tuple[str, str]:
    """One stream's outcome: its kind and, for *other*, why."""
    loop = asyncio.get_running_loop()
    protocol: _Stream | None = None
    try:
        async with asyncio.timeout_at(deadline):
            _, protocol = await loop.create_connection(_Stream, host, port)
            protocol = cast(_Stream, protocol)
            protocol.send(request)
            await protocol.ended
    except TimeoutError:
        return OTHER, "not finished in time" if protocol is not None else "connect timed out"
    except OSError as exc:
        if protocol is None:
            return OTHER, f"connect: {type(exc).__name__}"
    finally:
        if protocol is not None:
            protocol.close()
    assert protocol is not None
    return protocol.outcome()


class _Stream(asyncio.Protocol):
    """One connection, one request; tracks only what decides the outcome."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.status = 0
        self.tail = b""
        self.terminal: bytes | None = None
        self.error_body = b""
        self.complete = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def send(self, request: bytes) -> None:
        assert self.transport is not None
        self.transport.write(request)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self._end()

    def connection_lost(self, exc: Exception | None) -> None:
        self._end()

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        if self.status != 200:
            self.error_body += body[: 4096 - len(self.error_body)]
            return
        window = self.tail + body
        for marker in _TERMINAL:
            if marker in window:
                self.terminal = marker
        self.tail = window[-_TAIL:]

    def on_message_complete(self) -> None:
        self.complete = True
        self._end()

    def _end(self) -> None:
        if not self.ended.done():
            self.ended.set_result(None)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def outcome(self) -> tuple[str, str]:
        if self.status == 503 and _error_code(self.error_body) == "overloaded":
            return REFUSED, ""
        if self.status != 200:
            return OTHER, f"HTTP {self.status}" if self.status else "no answer"
        if self.terminal == _TERMINAL[0] and self.complete:
            return COMPLETED, ""
        if self.terminal in (None, _TERMINAL[1]):
            return FAILED_MIDWAY, ""
        if self.terminal == _TERMINAL[0]:  # completed, but the body was cut before its end
            return OTHER, "cut after response.completed"
        return OTHER, "response.incomplete"


def _error_code(body: bytes) -> str | None:
    try:
        error = orjson.loads(body).get("error")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return error.get("code") if isinstance(error, dict) else None
