"""One connection's frames on their way out, bounded by bytes.

Lanes :meth:`Outbox.put` whole events (never dropped, never split) and wait for
:meth:`Outbox.room` before putting more, so the outbox holds about ``limit`` bytes at
most, and one event larger than that still goes out alone. One writer sends them in
order; it is a task only while frames wait, so an idle connection has none.

A client that stops reading blocks the writer (the transport is full), the lanes then
wait for room and fall behind their runs. When a write has been waiting while the
lanes trail by more than ``limit`` bytes (``behind``), ``on_slow`` is told (the session
closes the connection with 4429; the runs go on). A lane replaying a stored log trails
nothing (it reads at its own pace), so a client reading slowly is paced, never closed.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Final

CHECK_INTERVAL: Final = 1.0
"""Seconds between checks of how far a connection whose write waits trails its runs."""

Send = Callable[[bytes], Awaitable[None]]
"""Sends one text frame (UTF-8 JSON); raises ``OSError`` once the client is gone."""


class Outbox:
    __slots__ = (
        "_behind",
        "_bytes",
        "_check_every",
        "_frames",
        "_limit",
        "_on_slow",
        "_room",
        "_send",
        "_sending",
        "_sent",
        "_timer",
        "_writer",
        "closed",
        "drained",
        "put_count",
    )

    def __init__(
        self,
        send: Send,
        limit: int,
        behind: Callable[[], int],
        on_slow: Callable[[], None],
        *,
        check_every: float = CHECK_INTERVAL,
    ) -> None:
        self._send = send
        self._limit = limit
        self._behind = behind
        self._on_slow = on_slow
        self._check_every = check_every
        self._frames: deque[bytes] = deque()
        self._bytes = 0
        self._writer: asyncio.Task[None] | None = None
        self._room: asyncio.Future[None] | None = None
        """Resolved when frames leave, for the lanes waiting for room."""
        self._sending = False
        self._timer: asyncio.TimerHandle | None = None
        self.closed = False
        """The connection is closing or gone: nothing more is sent."""
        self.put_count = 0
        """Frames put so far: the mark :meth:`sent` tells of."""
        self._sent = 0
        """Frames the transport took so far."""
        self.drained: Callable[[], None] | None = None
        """Called when the writer has sent every frame put (once per burst, not per
        frame): what waited for frames to go out can let go."""

    @property
    def pending(self) -> int:
        """Bytes put and not sent yet."""
        return self._bytes

    def put(self, frame: bytes) -> None:
        if self.closed:
            return
        self._frames.append(frame)
        self._bytes += len(frame)
        self.put_count += 1
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._write())

    def sent(self, mark: int) -> bool:
        """Whether the first ``mark`` frames put went out (a frame the closing dropped
        never does)."""
        return self._sent >= mark

    async def room(self) -> None:
        """Return once fewer than ``limit`` bytes wait (or the outbox closed)."""
        while self._bytes >= self._limit and not self.closed:
            if self._room is None:
                self._room = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._room)

    async def flushed(self) -> None:
        """Return once every frame put is sent (or the outbox closed)."""
        while self._writer is not None and not self.closed:
            await asyncio.wait([self._writer])

    def close(self) -> None:
        """Send nothing more: the writer is stopped (a frame it was sending is not
        half-sent: the transport takes whole frames) and lanes waiting for room go on."""
        self.closed = True
        self._frames.clear()
        self._bytes = 0
        if self._writer is not None and self._writer is not asyncio.current_task():
            self._writer.cancel()
        self._wake()

    async def _write(self) -> None:
        frames = self._frames
        try:
            while frames and not self.closed:
                frame = frames[0]
                self._sending = True
                if self._timer is None:
                    self._check_at(self._check_every)
                await self._send(frame)
                self._sending = False
                self._sent += 1
                frames.popleft()
                self._bytes -= len(frame)
                self._wake()
            if not frames and not self.closed and self.drained is not None:
                self.drained()
        except OSError:  # the client is gone
            self.close()
        finally:
            self._sending = False
            self._writer = None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def _wake(self) -> None:
        room, self._room = self._room, None
        if room is not None and not room.done():
            room.set_result(None)

    def _check_at(self, delay: float) -> None:
        self._timer = asyncio.get_running_loop().call_later(delay, self._check)

    def _check(self) -> None:
        """Timer callback: a write waiting while the lanes trail too far is a client that
        cannot keep up."""
        self._timer = None
        if self._writer is None or self.closed:
            return
        if self._sending and self._behind() + self._bytes > self._limit:
            self._on_slow()
            return
        self._check_at(self._check_every)
