"""The bound on the notifications a server may send during one call, or between calls.

A server may send notifications (progress, log messages) while a ``tools/call`` runs; the
gateway shows them to no one, but the SDK parses, validates and dispatches each one. A
server that floods them (in a tight loop, never answering) would keep the gateway busy
until the tool timeout, and its stream would go on after the call was abandoned. So each
session counts what its transport delivers that is no reply to a request it sent
(:class:`CountedReads`: notifications, requests of the server's, messages that could not
be read, replies to ids it never sent or already had answered, which the SDK drops as
cheaply as a log; logs and
progress, which the gateway has no use for, are then dropped there, before the SDK
dispatches them), and a call :meth:`~Notifications.bounded` by them fails
once more than ``limit`` arrived during it: its cancel scope is cancelled, as a timeout's
is, and the call raises :class:`NotificationFlood`. The session is then retired
(:mod:`.session`), so its transport, and the flood, are closed once its calls are over.
So is a session that receives more than ``limit`` while no call runs (an idle session
flooded on the stream Streamable HTTP opens for the server's own messages, kept until its
TTL otherwise).

The count is the session's: calls running at once on one session each count what the
session received during them, whichever call the server meant it for.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Self

import anyio
import mcp_types as types
from mcp.client._transport import TransportStreams
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.message import SessionMessage

MAX_CALL_NOTIFICATIONS = 10_000
"""Notifications a session may receive during one call (or between calls): far more than
an honest server's progress and logs (one every 6 ms through the default 60 s tool
timeout), and far fewer than a flood that would otherwise last until that timeout (or the
session's TTL)."""


class NotificationFlood(Exception):
    """More than the limit of notifications arrived during a bounded call."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"more than {limit} notifications during one call")
        self.limit = limit


class Notifications:
    """A session's count of the notifications it received, and the calls it bounds."""

    def __init__(
        self, limit: int = MAX_CALL_NOTIFICATIONS, on_flood: Callable[[], None] = lambda: None
    ) -> None:
        self.limit = limit
        self.count = 0
        self._on_flood = on_flood
        self._alarms: dict[int, tuple[int, Callable[[], None]]] = {}
        """Per bounded call (by serial): the count past which it fails, and how it fails."""
        self._next: float = math.inf
        """The lowest count in ``_alarms`` (perhaps lower: a call that ended left it)."""
        self._serial = 0
        self.idle = 0
        """Notifications since the last call began while no call ran (a server may send
        them at any time: over Streamable HTTP, on the stream the client opens for them)."""

        self.awaited: set[str] = set()
        """The ids of the requests sent and not answered yet (:class:`CountedWrites`), as
        the SDK matches a reply's (a string or a number alike)."""

    def received(self) -> None:
        """One more notification arrived: calls past the limit fail, and so does the
        session past it with no call running (:attr:`idle`)."""
        self.count += 1
        if not self._alarms:
            self.idle += 1
            if self.idle > self.limit:
                self._on_flood()
            return
        if self.count <= self._next:
            return
        for serial, (at, fail) in list(self._alarms.items()):
            if self.count > at:
                del self._alarms[serial]
                fail()
        self._next = min((at for at, _ in self._alarms.values()), default=math.inf)

    @contextmanager
    def bounded(self) -> Iterator[None]:
        """Within: what runs is cancelled once more than :attr:`limit` notifications
        arrived, and leaves as :class:`NotificationFlood`."""
        self._serial += 1
        self.idle = 0
        serial = self._serial
        at = self.count + self.limit
        with anyio.CancelScope() as scope:

            def fail() -> None:
                self._on_flood()
                scope.cancel()

            self._alarms[serial] = (at, fail)
            self._next = min(self._next, at)
            try:
                yield
            finally:
                self._alarms.pop(serial, None)
        if scope.cancelled_caught:
            raise NotificationFlood(self.limit)


class _Counted:
    """A transport stream counted by ``notifications``: closed as the stream it wraps,
    and a context manager that closes it, as that stream is."""

    def __init__(self, inner: ReadStream[Any] | WriteStream[Any], notifications: Notifications):
        self._inner = inner
        self._notifications = notifications

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class CountedReads(_Counted):
    """A transport's read stream, telling ``notifications`` of each item that is no
    reply (the SDK's dispatcher reads it, and ``last_context``, as it would the stream)."""

    _inner: ReadStream[SessionMessage | Exception]

    def __init__(
        self, inner: ReadStream[SessionMessage | Exception], notifications: Notifications
    ) -> None:
        super().__init__(inner, notifications)

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        """The next item the SDK is to see: each one counted, but for replies, and those
        the gateway ignores (:data:`IGNORED`) skipped."""
        while True:
            item = await self._inner.receive()  # a checkpoint each, however many are skipped
            message = item.message if isinstance(item, SessionMessage) else None
            if isinstance(message, _REPLIES) and _answers(message, self._notifications):
                return item
            self._notifications.received()
            if not (isinstance(message, types.JSONRPCNotification) and message.method in IGNORED):
                return item

    def __aiter__(self) -> CountedReads:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None


class CountedWrites(_Counted):
    """A transport's write stream, telling ``notifications`` of each request sent (whose
    reply is then no flood's)."""

    _inner: WriteStream[SessionMessage]

    def __init__(self, inner: WriteStream[SessionMessage], notifications: Notifications) -> None:
        super().__init__(inner, notifications)

    async def send(self, item: SessionMessage, /) -> None:
        if isinstance(item.message, types.JSONRPCRequest):
            self._notifications.awaited.add(str(item.message.id))
        await self._inner.send(item)


def _answers(reply: types.JSONRPCResponse | types.JSONRPCError, counted: Notifications) -> bool:
    """Whether ``reply`` answers a request sent and not answered yet (then it is not)."""
    key = str(reply.id)
    if key not in counted.awaited:
        return False
    counted.awaited.discard(key)
    return True


_REPLIES = (types.JSONRPCResponse, types.JSONRPCError)

IGNORED = frozenset({"notifications/message", "notifications/progress"})
"""Notifications the gateway has no use for (it shows a server's logs and progress to no
one, and asks no progress of it): skipped before the SDK validates and dispatches them,
which halves what each costs."""


def counted(streams: TransportStreams, notifications: Notifications) -> TransportStreams:
    """``streams`` with their reads counted by ``notifications``."""
    read, write = streams
    return CountedReads(read, notifications), CountedWrites(write, notifications)
