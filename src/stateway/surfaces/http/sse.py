"""The SSE response the routes stream: pre-encoded frames, one ASGI body message per
chunk, the status line held until the stream opens (so an early failure is still an HTTP
error), keep-alive comments on a timer, a :class:`Watcher` stream's way out (its client
gone, or too far behind the log it follows), and the end of a stream whose credential is
revoked or expires while it streams (:mod:`stateway.surfaces.auth.revocation`) or that
cannot go on (its error frame).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Final

from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from stateway.core.deadline import Deadline
from stateway.core.errors import CredentialRevoked, GatewayError
from stateway.surfaces.auth.revocation import RevocationWatch
from stateway.surfaces.http.transport import watch_disconnect

ENDING_WAIT = 5.0
"""Seconds the error frame ending a stream cut off (its credential stopped holding, its
response deleted) may wait for a slow client."""

KEEPALIVE_INTERVAL = 15.0
"""Seconds a stream may stay silent before it gets an SSE comment line."""

MAX_WATCHER_LAG = 1024 * 1024
"""Bytes of events a watcher may trail the run it watches by while its writes wait for the
client to read (kernel and transport buffers full); past that it is disconnected (it
resumes with ``starting_after``)."""
LAG_CHECK_INTERVAL = 1.0
"""Seconds between checks of a watcher's lag while one of its writes waits."""

log = logging.getLogger(__name__)

COMMENT: Final = b": keep-alive\n\n"
"""The keep-alive a stream sends when idle (an SSE comment), unless its protocol has its own."""
UNBUFFERED: Final = (
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
)
"""What an event stream says to the caches and proxies before its client (nginx buffers a
reply without ``X-Accel-Buffering: no``): pass its events on as they come. A relayed one
(:mod:`.relay`) says it too."""
_SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), *UNBUFFERED]


def status_line(headers: dict[str, str] | None = None) -> Message:
    """The status line of a stream (200) and its headers, with ``headers`` besides."""
    extra = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    return {"type": "http.response.start", "status": 200, "headers": [*_SSE_HEADERS, *extra]}


Chunks = AsyncGenerator[tuple[bytes, bool], None]
"""Whole SSE frames (one or more per chunk), each flagged True when it is the last."""

Ending = Callable[[GatewayError], bytes]
"""The SSE frame a stream cut off by ``error`` ends with, in its protocol's shape."""

Opening = Callable[[], Awaitable[None]]
"""Awaited before the status line is sent, for at most one keep-alive interval; a
:class:`GatewayError` it raises is answered with its own status instead of a stream."""


async def held(opening: Opening, keepalive: float) -> None:
    """Await ``opening`` for at most ``keepalive`` seconds, as a stream holds its status
    line: the :class:`GatewayError` it raises meanwhile is raised."""
    try:
        with Deadline(keepalive):
            await opening()
    except TimeoutError:
        pass


async def send_ending(
    send: Send,
    frame: bytes,
    code: str | None,
    *,
    after: Callable[[], Awaitable[object]] | None = None,
) -> None:
    """Send ``frame``, the error frame ending a stream already open, once ``after`` is done
    (a write under way going out whole). A client slow to read them is waited for
    :data:`ENDING_WAIT` seconds in all only: then the connection is left unfinished, which
    closes it, and the log says so with the error's ``code``. Its client gone: the
    ``OSError``."""
    try:
        with Deadline(ENDING_WAIT):
            if after is not None:
                await after()
            await send({"type": "http.response.body", "body": frame, "more_body": False})
    except TimeoutError:
        log.warning(
            "left a stream unfinished (%s): its client did not read the last frame "
            "within %g seconds",
            code,
            ENDING_WAIT,
        )


@dataclass(frozen=True, slots=True)
class Watcher:
    """What makes a stream a watcher of a log it does not drive (a background run): it
    stops as soon as its client leaves, and it is disconnected when, with a write waiting
    for the client to read (a full socket buffer), it trails the log by more than
    ``max_lag`` bytes, as ``behind`` counts them."""

    behind: Callable[[], int]
    max_lag: int = MAX_WATCHER_LAG
    check_every: float = LAG_CHECK_INTERVAL


class SSEResponse(Response):
    """Streams pre-encoded SSE frames, one ASGI body message per chunk; the last chunk
    also ends the body, sparing a separate write for the terminator.

    The status line waits for ``opening`` (bounded by ``keepalive``), so a stream that
    fails before it starts can still be answered with an HTTP error (rendered by
    ``error_response`` when given, else by the app's error handler). Once streaming, a
    ``: keep-alive`` comment goes out whenever nothing was sent for ``keepalive`` seconds
    (a timer, not a task, so a stream that never idles pays almost nothing for it), or
    ``idle_frame`` instead (Messages streams send a ``ping`` event).
    When the client goes away, ``on_disconnect`` is called once and streaming stops. A
    :class:`Watcher` stream stops even while it waits for frames, and is cut off (the
    connection closed mid-body) when it trails too far behind.

    Given its protocol's ``ending``, a stream whose credential stops holding meanwhile (an
    API key revoked, checked on a timer; or expired: :class:`RevocationWatch`) stops at
    once, wherever it waits, as if its client had left (``on_disconnect`` is called: a
    client's own run is cancelled, a watched one goes on), then sends ``ending`` (the 401
    instead, when the status line has not gone out yet) and closes. A
    :class:`GatewayError` the frames raise once streaming (a watched response deleted
    meanwhile) ends the stream with ``ending`` too.

    ``opened``: its status line and headers went out already (a keyed retry that waited
    for its key: :mod:`.keyed_waits`); it goes on from there, keep-alives from the start,
    and a failure before it opens, which would have been its HTTP error, is its
    ``ending`` instead.
    """

    def __init__(
        self,
        frames: Chunks,
        on_disconnect: Callable[[], None],
        *,
        opening: Opening | None = None,
        keepalive: float = KEEPALIVE_INTERVAL,
        idle_frame: bytes = COMMENT,
        headers: dict[str, str] | None = None,
        error_response: Callable[[GatewayError], Response] | None = None,
        watcher: Watcher | None = None,
        ending: Ending | None = None,
        opened: bool = False,
    ) -> None:
        super().__init__(status_code=200)
        assert ending is not None or not opened, "an open stream's failure ends it in its shape"
        self._opened = opened
        self._idle_frame = idle_frame
        self._error_response = error_response
        self._stream_headers = headers
        self._frames = frames
        self._on_disconnect = on_disconnect
        self._opening = opening
        self._keepalive = keepalive
        self._watcher = watcher
        self._ending = ending
        self._revoked: CredentialRevoked | None = None
        self._guard: asyncio.Timeout | None = None
        """A watcher's way out: expired when its client leaves or it falls behind; any
        stream's when its credential stops holding."""
        self._lag_timer: asyncio.TimerHandle | None = None
        self._gone = False
        self._left = False
        self._started = False
        self._ended = False
        self._sending = False
        self._last_sent = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._comment: asyncio.Task[None] | None = None

    def _disconnected(self) -> None:
        if not self._gone:
            self._gone = True
            self._leave()
            self._stop_watching()

    def _leave(self) -> None:
        if not self._left:
            self._left = True
            self._on_disconnect()

    def _revoke(self, revoked: CredentialRevoked) -> None:
        """:class:`RevocationWatch` callback: stop streaming, as if the client left."""
        if self._gone or self._ended or self._guard is None:
            return
        self._revoked = revoked
        self._leave()
        self._stop_watching()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        watcher = asyncio.create_task(watch_disconnect(receive, self._disconnected))
        revocation = None if self._ending is None else RevocationWatch.start(scope, self._revoke)
        try:
            if self._watcher is None and revocation is None:
                await self._respond(scope, receive, send)
            else:
                await self._respond_guarded(scope, receive, send)
            if self._revoked is not None and not self._gone:
                await self._end_revoked(self._revoked, scope, receive, send)
        except OSError:
            self._disconnected()
        finally:
            watcher.cancel()
            if revocation is not None:
                revocation.stop()
            for timer in (self._timer, self._lag_timer):
                if timer is not None:
                    timer.cancel()
            if self._comment is not None:
                self._comment.cancel()

    async def _respond_guarded(self, scope: Scope, receive: Receive, send: Send) -> None:
        guard = asyncio.timeout(None)
        try:
            async with guard:
                self._guard = guard
                await self._respond(scope, receive, send)
        except TimeoutError:
            if not guard.expired():
                raise
        finally:
            self._guard = None

    async def _respond(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with aclosing(self._frames) as frames:
            if self._opened:  # its status line went out already: it idles from now
                await self._open(send)
            if self._opening is not None:
                try:
                    await self._hold(self._opening)
                except GatewayError as error:
                    if self._started:  # its status line gone: it ends in the stream
                        await self._cannot_go_on(error, send)
                        return
                    if self._error_response is None:
                        raise
                    self._ended = True
                    await self._error_response(error)(scope, receive, send)
                    return
            if self._gone:
                return
            if not self._started:
                await self._open(send)
            try:
                await self._stream(frames, send)
            except GatewayError as error:  # the stream cannot go on (its response deleted)
                await self._cannot_go_on(error, send)

    async def _open(self, send: Send) -> None:
        """Start streaming: the status line (unless it went out already), the keep-alive
        timer, a watcher's lag checks."""
        self._started = True
        # Only a stream not yet open is refused with an answer of its own: what that
        # answer needs (a Messages request's body, to name a block) goes now.
        self._error_response = None
        if not self._opened:
            await send(status_line(self._stream_headers))
        now = asyncio.get_running_loop().time()
        self._idle_from(now, send)
        if self._watcher is not None:
            self._check_lag_at(now + self._watcher.check_every)

    async def _end_revoked(
        self, revoked: CredentialRevoked, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """The end of a stream cut off by its credential's revocation or expiry: the
        protocol's error frame (a slow client waited for a while only: then the connection
        is left unfinished, which closes it), or the 401 before the stream opened."""
        assert self._ending is not None
        if not self._started:
            if self._error_response is None:
                raise revoked
            await self._error_response(revoked)(scope, receive, send)
            return
        await self._end_with(revoked, send)

    async def _cannot_go_on(self, error: GatewayError, send: Send) -> None:
        """The end of a started stream whose frames raised ``error``: its error frame, but
        quietly when its client left (nobody to tell)."""
        if self._gone:
            return
        if self._ending is None:
            raise error
        await self._end_with(error, send)

    async def _end_with(self, error: GatewayError, send: Send) -> None:
        """The protocol's error frame for ``error``, ending a started stream (a slow client
        is waited for a while only: then the connection is left unfinished, which closes
        it)."""
        assert self._ending is not None
        if self._ended:
            return
        self._ended = True
        await send_ending(send, self._ending(error), error.code, after=self._comment_written)

    async def _comment_written(self) -> None:
        """A comment being written out whole, if any."""
        comment = self._comment
        # a comment the stream was waiting on when it was cut off was cancelled with that
        # wait (a server has its bytes before it waits): awaiting it raises
        if comment is not None and not comment.cancelled():
            await comment

    def _stop_watching(self) -> None:
        """End a guarded stream's streaming at once, wherever it waits."""
        if self._guard is not None and not self._guard.expired():
            self._guard.reschedule(asyncio.get_running_loop().time() - 1)

    def _check_lag_at(self, when: float) -> None:
        self._lag_timer = asyncio.get_running_loop().call_at(when, self._check_lag)

    def _check_lag(self) -> None:
        """Timer callback: drop a watcher whose write waits while it trails too far."""
        watcher = self._watcher
        if watcher is None or self._ended or self._gone:
            return
        behind = watcher.behind()
        if self._sending and behind > watcher.max_lag:
            log.warning(
                "disconnecting a stream watcher %d bytes behind (more than %d) whose "
                "client stopped reading; it can resume with starting_after",
                behind,
                watcher.max_lag,
            )
            self._gone = True
            self._stop_watching()
            return
        self._check_lag_at(asyncio.get_running_loop().time() + watcher.check_every)

    async def _hold(self, opening: Opening) -> None:
        await held(opening, self._keepalive)

    async def _stream(self, frames: Chunks, send: Send) -> None:
        loop = asyncio.get_running_loop()
        async for chunk, last in frames:
            if self._gone:
                return
            if self._comment is not None:
                await self._comment  # a comment being written goes out whole first
            self._ended = last
            self._sending = True
            await send({"type": "http.response.body", "body": chunk, "more_body": not last})
            self._sending = False
            self._last_sent = loop.time()
            if last:
                return
        if not self._gone:
            if self._comment is not None:
                await self._comment
            self._ended = True
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    def _idle_from(self, when: float, send: Send) -> None:
        self._last_sent = when
        loop = asyncio.get_running_loop()
        self._timer = loop.call_at(when + self._keepalive, self._check_idle, send)

    def _check_idle(self, send: Send) -> None:
        """Timer callback: write a comment if nothing was sent for a whole interval."""
        self._timer = None
        if self._ended or self._gone:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._sending:  # a write is waiting for a slow reader: a comment would not help
            self._timer = loop.call_at(now + self._keepalive, self._check_idle, send)
        elif self._last_sent + self._keepalive > now:
            self._timer = loop.call_at(self._last_sent + self._keepalive, self._check_idle, send)
        else:
            self._comment = loop.create_task(self._send_comment(send))

    async def _send_comment(self, send: Send) -> None:
        try:
            await send({"type": "http.response.body", "body": self._idle_frame, "more_body": True})
        except OSError:
            self._disconnected()
        self._comment = None
        self._idle_from(asyncio.get_running_loop().time(), send)
