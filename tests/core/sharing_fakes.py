"""In-memory stand-ins for what replicas share: owners' leases and the event fan-out."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from stateway.core.coordination import AskHandler, Published
from stateway.core.errors import StorageError
from stateway.core.ports import EventBatch, Heartbeat


class MemoryOwnerLeases:
    """``counts`` and ``timeouts`` by owner; ``fail`` makes every call raise
    :class:`StorageError`."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.timeouts: dict[str, float] = {}
        self.fail = False

    async def register(self, owner: str, lease: float) -> None:
        self._check()
        self.counts.setdefault(owner, 0)
        self.timeouts.setdefault(owner, lease)

    async def renew(self, owner: str) -> bool:
        self._check()
        if owner not in self.counts:
            return False
        self.counts[owner] += 1
        return True

    async def beats(self) -> dict[str, Heartbeat]:
        self._check()
        return {owner: Heartbeat(n, self.timeouts[owner]) for owner, n in self.counts.items()}

    async def forget(self, owners: list[str]) -> None:
        self._check()
        for owner in owners:
            self.counts.pop(owner, None)
            self.timeouts.pop(owner, None)

    def _check(self) -> None:
        if self.fail:
            raise StorageError("The database is unavailable.")


class QueueFollowing:
    def __init__(self) -> None:
        self.queue: deque[Published] = deque()
        self.ready = asyncio.Event()
        self.waits = 0
        """Times ``next`` found nothing and waited (each a quiet read after it)."""

    def put(self, published: Published) -> None:
        self.queue.append(published)
        self.ready.set()

    async def next(self, within: float) -> Published | None:
        if not self.queue:
            self.waits += 1
            self.ready.clear()
            try:
                async with asyncio.timeout(within):
                    await self.ready.wait()
            except TimeoutError:
                return None
        return self.queue.popleft()

    def pending(self) -> int:
        return sum(len(p) for published in self.queue for p in published.batch.payloads)


class MemoryFanout:
    """Delivers each published batch (and mark) to the followers of its response in this
    process, and records each batch in ``published``; ``following`` is set while anyone
    follows. Each question is recorded in ``asks`` and handed to the handler given to
    ``start``. Between :meth:`hold` and :meth:`release` what is published waits, as it
    may in its publisher's outbox: it reaches whoever follows when it is released."""

    def __init__(self) -> None:
        self.published: list[tuple[str, str, EventBatch, bool]] = []
        self.followers: dict[tuple[str, str], list[QueueFollowing]] = {}
        self.following = asyncio.Event()
        self.asks: list[tuple[str, str]] = []
        self._asked: AskHandler | None = None
        self._held: list[tuple[tuple[str, str], Published]] | None = None

    def hold(self) -> None:
        self._held = []

    def release(self) -> None:
        held, self._held = self._held or [], None
        for key, published in held:
            self._deliver(key, published)

    def ask(self, tenant_id: str, response_id: str, question: str) -> None:
        self.asks.append((tenant_id, response_id))
        if self._asked is not None:
            self._asked(tenant_id, response_id, question)

    def mark(self, tenant_id: str, response_id: str, logged: int, question: str | None) -> None:
        self._deliver((tenant_id, response_id), Published(EventBatch(logged, []), False, question))

    async def start(self, asked: AskHandler) -> None:
        self._asked = asked

    def publish(self, tenant_id: str, response_id: str, batch: EventBatch, last: bool) -> None:
        self.published.append((tenant_id, response_id, batch, last))
        self._deliver((tenant_id, response_id), Published(batch, last))

    def _deliver(self, key: tuple[str, str], published: Published) -> None:
        if self._held is not None:
            self._held.append((key, published))
            return
        for following in self.followers.get(key, []):
            following.put(published)

    @asynccontextmanager
    async def follow(self, tenant_id: str, response_id: str) -> AsyncIterator[QueueFollowing]:
        following = QueueFollowing()
        followers = self.followers.setdefault((tenant_id, response_id), [])
        followers.append(following)
        self.following.set()
        try:
            yield following
        finally:
            followers.remove(following)

    async def aclose(self) -> None:
        return None
