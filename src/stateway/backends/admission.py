"""The gateway's own queue in front of each model server: connection slots and admission.

Each backend allows ``max_connections`` upstream calls at once (:class:`ConnectionSlots`).
A call that finds them all taken waits, first come first served, for at most
``pool_timeout``; that wait belongs to the gateway and never counts against the upstream's
``connect_timeout``. One :class:`WaitingRoom` per process counts the calls waiting across
all backends: once ``[server] max_queued_requests`` wait, a new call is refused at once.
The slots of a backend live in the process's :class:`WaitingRoom`, so the limit and the
queue hold across a configuration reload (the superseded generation's runs and the new
generation's requests share them) while the backend's limits stay the same. The room
holds them only while something else does (a generation's client, a call waiting or
holding a slot): the slots of limits no generation uses any more go with the last of
them, so reloads that change limits leave nothing behind.
Both refusals are :class:`~stateway.core.errors.Overloaded` (503 with ``Retry-After``), so a
client learns early and honestly that the gateway is full, not that the model server failed.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from stateway.core.errors import Overloaded


class WaitingRoom:
    """The process-wide count of upstream calls waiting for a connection slot, and each
    backend's slots."""

    __slots__ = ("_slots", "capacity", "waiting")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.waiting = 0
        self._slots: weakref.WeakValueDictionary[tuple[str, str, int, float], ConnectionSlots]
        self._slots = weakref.WeakValueDictionary()
        """Each backend's slots, while a client (or a call) holds them."""

    @property
    def queues(self) -> int:
        """The backends' slots kept: one per backend, model server and limits in use."""
        return len(self._slots)

    def slots(
        self, backend: str, size: int, wait_limit: float, upstream: str = ""
    ) -> ConnectionSlots:
        """The connection slots of ``backend`` (its model server at ``upstream``), shared
        by every client made for it over this room: a reloaded configuration's backend
        (its own generation, its own pool) waits in the same queue and counts against the
        same ``size`` as the one still serving runs of the generation it superseded. A
        changed ``size`` or ``wait_limit`` is a new queue, for the requests admitted after it."""
        key = (backend, upstream, size, wait_limit)
        slots = self._slots.get(key)
        if slots is None:
            slots = self._slots[key] = ConnectionSlots(backend, size, wait_limit, self)
        return slots

    @asynccontextmanager
    async def seat(self, backend: str) -> AsyncIterator[None]:
        """Hold one place while the block waits; refuse at once when every place is taken."""
        if self.waiting >= self.capacity:
            raise Overloaded(
                f"The gateway is at capacity: {self.waiting} requests already wait for a "
                f"connection to model server '{backend}'. Retry shortly."
            )
        self.waiting += 1
        try:
            yield
        finally:
            self.waiting -= 1


class ConnectionSlots:
    """At most ``size`` concurrent calls to one backend; a fair, bounded wait for the rest."""

    __slots__ = ("__weakref__", "_backend", "_free", "_room", "_semaphore", "_wait_limit")

    def __init__(self, backend: str, size: int, wait_limit: float, room: WaitingRoom) -> None:
        self._backend = backend
        self._semaphore = asyncio.Semaphore(size)
        """FIFO: a newcomer never overtakes a waiter (``locked()`` while any waits)."""
        self._free = size
        """Slots no call holds."""
        self._wait_limit = wait_limit
        self._room = room

    def full(self, pending: int = 0) -> bool:
        """Whether a call now would be refused at once, once ``pending`` calls about to be
        made (requests admitted, not yet at their first call) took what is left before
        it: the free slots, then the free places in the process's queue."""
        return pending >= self._free + self._room.capacity - self._room.waiting

    async def acquire(self) -> None:
        """Take one slot, waiting for it as described in the module doc; give it back
        with :meth:`release` (once the call, or a relayed answer, is over)."""
        if self._semaphore.locked():
            await self._wait()
        else:
            await self._semaphore.acquire()  # free: returns without suspending
        self._free -= 1

    def release(self) -> None:
        self._free += 1
        self._semaphore.release()

    async def _wait(self) -> None:
        async with self._room.seat(self._backend):
            try:
                async with asyncio.timeout(self._wait_limit):
                    await self._semaphore.acquire()
            except TimeoutError:
                raise Overloaded(
                    f"No connection to model server '{self._backend}' came free within "
                    f"{self._wait_limit:g} s (pool_timeout). Retry shortly."
                ) from None
