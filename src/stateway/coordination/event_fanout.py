"""Event fan-out through Redis pub/sub (:class:`~stateway.core.coordination.EventFanout`).

One channel per response, ``{prefix}events:{tenant}\\x1f{response id}``. A message is a
header line, ``{first sequence number} {1 if it ends with the terminal event else 0}``,
then the batch's payloads one per line (JSON written by orjson holds no raw newline); a
mark (how far its owner has logged, when asked) is a header alone, naming the question
it answers: ``{count} 0 {question}``.

Questions (:meth:`RedisEventFanout.ask`) are published on the standing channel,
``{prefix}events``, as ``{tenant}\\x1f{response id}\\x1f{question}``: every process
listening (:meth:`RedisEventFanout.start`) hears them, and the one running the response
answers with a mark on its channel.

Processes older than question ids (a rolling upgrade) ask ``{tenant}\\x1f{response id}``
and answer ``{count} 0``. Such a question is answered in that shape, and such a mark is
decoded naming no question (to its reader, another watch's mark). An old process reads a
question with an id as one of a response it does not run, so it stays silent (the asker
takes the watch unjudged after ``owner_position.ASK_WAIT``), and a mark with an id as a
malformed message: ignored with a warning, never taken for a batch or for its answer.

Publishing never waits: :meth:`RedisEventFanout.publish` queues the message, and one task
sends everything queued at once (one pipelined round trip), in order. While Redis cannot
be reached batches are dropped, with one warning per outage: followers read the store.

Following: one pub/sub connection per process, subscribed to each response that some
client of this process follows (``SUBSCRIBE`` with its first follower, ``UNSUBSCRIBE``
after its last) and to the standing channel; the reader hands each message to the queues
of that response's followers, and each question to the handler given to ``start``. It is
opened by ``start`` (again every ``RESUBSCRIBE_PAUSE`` while Redis cannot be reached), or
by the first follower of a process that does not listen.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final

from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from stateway.coordination.subscription import listen
from stateway.core.coordination import AskHandler, Published
from stateway.core.ports import EventBatch

log = logging.getLogger(__name__)

MAX_OUTBOX: Final = 10_000
"""Messages waiting to be published at most; past that new ones are dropped."""
RESUBSCRIBE_PAUSE: Final = 1.0
"""Seconds between attempts to subscribe again after the connection dropped."""


class RedisEventFanout:
    def __init__(self, client: Redis, prefix: str = "stateway:") -> None:
        self._redis = client
        self._prefix = prefix
        self._standing = prefix + "events"
        self._outbox: deque[tuple[str, bytes]] = deque()
        self._sender: asyncio.Task[None] | None = None
        self._publish_failing = False
        self._pubsub: PubSub | None = None
        self._reader: asyncio.Task[None] | None = None
        self._followers: dict[bytes, set[_Following]] = {}
        self._lock = asyncio.Lock()
        """Held while (un)subscribing, so channels' commands go out in decision order."""
        self._asked: AskHandler | None = None
        self._connecting: asyncio.Task[None] | None = None
        """Connecting again while Redis could not be reached at :meth:`start`."""

    def channel(self, tenant_id: str, response_id: str) -> str:
        return f"{self._prefix}events:{tenant_id}\x1f{response_id}"

    def publish(self, tenant_id: str, response_id: str, batch: EventBatch, last: bool) -> None:
        self._queue(self.channel(tenant_id, response_id), encode(batch, last))

    def _queue(self, channel: str, message: bytes) -> None:
        if len(self._outbox) >= MAX_OUTBOX:
            self._publish_failed("too many batches are waiting to be published")
            return
        self._outbox.append((channel, message))
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send())

    def mark(self, tenant_id: str, response_id: str, logged: int, question: str | None) -> None:
        self._queue(self.channel(tenant_id, response_id), encode_mark(logged, question))

    def ask(self, tenant_id: str, response_id: str, question: str) -> None:
        self._queue(self._standing, f"{tenant_id}\x1f{response_id}\x1f{question}".encode())

    async def start(self, asked: AskHandler) -> None:
        """Listen for questions from now on: the pub/sub connection is opened at once
        (again every ``RESUBSCRIBE_PAUSE`` while Redis cannot be reached)."""
        self._asked = asked
        if not await self._listening(warn=True):
            self._connecting = asyncio.create_task(self._listen_later())

    async def _listening(self, *, warn: bool) -> bool:
        async with self._lock:
            if self._pubsub is not None:
                return True
            try:
                await self._connect()
            except RedisError as exc:
                if warn:
                    log.warning("event fan-out: Redis is unreachable (%s); connecting again", exc)
                return False
            return True

    async def _listen_later(self) -> None:
        while True:
            await asyncio.sleep(RESUBSCRIBE_PAUSE)
            if await self._listening(warn=False):
                log.info("event fan-out: Redis answers; listening")
                return

    @asynccontextmanager
    async def follow(self, tenant_id: str, response_id: str) -> AsyncIterator[_Following]:
        channel = self.channel(tenant_id, response_id).encode()
        following = _Following()
        followers: set[_Following] | None = None
        try:
            async with self._lock:
                followers = self._followers.setdefault(channel, set())
                followers.add(following)
                if len(followers) == 1:
                    await self._subscribe(channel)
            yield following
        finally:
            # Its follower gone (left, or cancelled while the channel was being subscribed;
            # one cancelled before it had the lock joined nothing), the channel is let go
            # with its last one, even if this task is cancelled again: else it stayed,
            # subscribed for nobody.
            if followers is not None:
                followers.discard(following)
                if not followers:
                    await asyncio.shield(self._let_go(channel, followers))

    async def _let_go(self, channel: bytes, followers: set[_Following]) -> None:
        async with self._lock:
            if not followers and self._followers.get(channel) is followers:
                del self._followers[channel]
                await self._unsubscribe(channel)

    async def aclose(self) -> None:
        if self._connecting is not None:
            self._connecting.cancel()
            await asyncio.wait([self._connecting])
        if self._sender is not None:
            await asyncio.wait([self._sender], timeout=1.0)  # what is queued, if it can
            self._sender.cancel()
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.wait([self._reader])
        if self._pubsub is not None:
            await self._pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]  # typed from redis 8.2
        await self._redis.aclose()

    async def _send(self) -> None:
        while self._outbox:
            messages = list(self._outbox)
            self._outbox.clear()
            pipeline = self._redis.pipeline(transaction=False)
            for channel, message in messages:
                pipeline.publish(channel, message)
            try:
                await pipeline.execute()
            except RedisError as exc:
                self._publish_failed(str(exc))
            else:
                self._publish_failing = False

    def _publish_failed(self, why: str) -> None:
        if not self._publish_failing:
            log.warning("event fan-out: %s; followers elsewhere read the store", why)
        self._publish_failing = True

    async def _subscribe(self, channel: bytes) -> None:
        try:
            pubsub = self._pubsub or await self._connect()
            await pubsub.subscribe(channel)
        except RedisError as exc:  # followers read the store meanwhile
            log.warning("event fan-out: subscribing failed: %s", exc)

    async def _connect(self) -> PubSub:
        """The process's pub/sub connection, subscribed to the standing channel, read by
        its reader task from now on."""
        pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(self._standing)
        except RedisError:
            await pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]  # typed from redis 8.2
            raise
        self._pubsub = pubsub
        self._reader = asyncio.create_task(self._read(pubsub))
        return pubsub

    async def _unsubscribe(self, channel: bytes) -> None:
        if self._pubsub is None:
            return
        try:
            await self._pubsub.unsubscribe(channel)
        except RedisError as exc:
            log.warning("event fan-out: unsubscribing failed: %s", exc)

    async def _read(self, pubsub: PubSub) -> None:
        """Hand each message to its followers, or its question to the handler; after a
        drop, subscribe to the standing channel and the followed ones again (followers
        read the store meanwhile)."""
        await listen(
            pubsub,
            lambda: (self._standing, *self._followers),
            self._deliver,
            name="event fan-out",
            pause=RESUBSCRIBE_PAUSE,
            log=log,
        )

    def _deliver(self, message: dict[str, Any]) -> None:
        if message.get("type") != "message":
            return
        channel = message.get("channel") or b""
        if channel == self._standing.encode():
            self._answer(message["data"])
            return
        followers = self._followers.get(channel)
        if not followers:
            return
        published = decode(message["data"])
        if published is None:
            log.warning("event fan-out: ignoring a malformed message")
            return
        for following in followers:
            following.put(published)

    def _answer(self, message: bytes) -> None:
        fields = message.split(b"\x1f")
        if self._asked is None or len(fields) not in (2, 3) or not all(fields[1:]):
            return  # not listening (a follower only), or not a question
        tenant, response, *asked = fields  # no question id: an older process asks
        try:
            question = asked[0].decode() if asked else None
            self._asked(tenant.decode(), response.decode(), question)
        except UnicodeDecodeError:
            log.warning("event fan-out: ignoring a malformed question")


class _Following:
    """One follower's queue of batches received."""

    def __init__(self) -> None:
        self._queue: deque[Published] = deque()
        self._ready = asyncio.Event()
        self._bytes = 0

    def put(self, published: Published) -> None:
        self._queue.append(published)
        self._bytes += _size(published)
        self._ready.set()

    async def next(self, within: float) -> Published | None:
        if not self._queue:
            self._ready.clear()
            try:
                async with asyncio.timeout(within):
                    await self._ready.wait()
            except TimeoutError:
                return None
        published = self._queue.popleft()
        self._bytes -= _size(published)
        return published

    def pending(self) -> int:
        return self._bytes


def encode(batch: EventBatch, last: bool) -> bytes:
    header = b"%d %d\n" % (batch.first, 1 if last else 0)
    return header + b"\n".join(batch.payloads)


def encode_mark(logged: int, question: str | None) -> bytes:
    if question is None:  # answering an older process, as it answers
        return b"%d 0\n" % logged
    return b"%d 0 %s\n" % (logged, question.encode())


def decode(data: bytes) -> Published | None:
    """The batch (or mark) of a message; None when it is neither."""
    header, newline, body = data.partition(b"\n")
    fields = header.split(b" ")
    if not (newline and len(fields) in (2, 3) and fields[0].isdigit()):
        return None
    first, last = int(fields[0]), fields[1]
    if last not in (b"0", b"1"):
        return None
    if len(fields) == 3:  # a mark answering a question
        question = fields[2]
        if body or last == b"1" or not (question.isascii() and question.isalnum()):
            return None
        return Published(EventBatch(first, []), False, question.decode())
    if not body:  # a mark of an older owner, or for an older asker (the end is never one)
        return None if last == b"1" else Published(EventBatch(first, []), False)
    return Published(EventBatch(first, body.split(b"\n")), last == b"1")


def _size(published: Published) -> int:
    return sum(map(len, published.batch.payloads))
