"""Concurrent model requests per principal (``[rate_limits] concurrent_requests``).

A model request (what :class:`~stateway.core.limits.RateLimits` admits) takes one of its
principal's slots when it is admitted and gives it back when what it started ends: a run
when it ends (a background one holds it to its end; a stream whose client left ends when
its run does), a relayed Chat Completions answer when its relay closes, a compaction when
it returns; a request refused or failing before any of those exists gives it back at
once. :meth:`Gateway.execute <stateway.core.gateway.Gateway.execute>` is the one place that
takes and hands over each slot; a :class:`Slot` is given back once, however many times
:meth:`Slot.release` is called.

Whoever learns that a request ended may send the next one at once, to any replica: so the
end waits for its slot to be free everywhere before it is told (a run's before its end is
stored and its terminal event emitted, a relay's before its body's last bytes, an answer
or an error before it is returned): :meth:`Slot.given_back`. Slots counted in process are
free as they are released, and it costs nothing; a slot in Redis is free once Redis
answered its removal, which the end waits for only a moment (a Redis slow to answer
leaves it to be freed beside the end, as when it fails).

The slots live behind :class:`RequestSlots`: :class:`MemoryRequestSlots` counts them in
process (one gateway); :mod:`stateway.coordination.request_slots` keeps them in Redis,
shared by every replica, each held under a lease its process renews.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Protocol


class Slot:
    """One slot held by a model request. :meth:`release` gives it back the first time it
    is called, and does nothing after."""

    __slots__ = ("_answer", "_give_back", "_wait")

    def __init__(self, give_back: GiveBack | None = None, wait: float = 0.0) -> None:
        """``give_back`` frees it where it is kept (None: a slot nothing keeps, handed out
        while its store cannot be asked); ``wait``: the seconds :meth:`given_back` waits
        at most for its store's answer."""
        self._give_back = give_back
        self._wait = wait
        self._answer: asyncio.Future[None] | None = None

    @property
    def held(self) -> bool:
        return self._give_back is not None

    def release(self) -> None:
        give_back, self._give_back = self._give_back, None
        if give_back is not None:
            self._answer = give_back()

    async def given_back(self) -> None:
        """:meth:`release` it, and return once it is free for every process: at once for a
        slot its store freed as it was released; else once its store answered, or after
        ``wait`` seconds without an answer, or at once when it failed (the slot is then
        freed later, beside its request's end)."""
        self.release()
        answer = self._answer
        if answer is not None and not answer.done():
            await asyncio.wait([answer], timeout=self._wait)


GiveBack = Callable[[], "asyncio.Future[None] | None"]
"""Frees a slot where it is kept: None once it is free for every process, else the answer
of its store under way."""


class RequestSlots(Protocol):
    async def take(self, key: str, limit: int) -> Slot | None:
        """One of the ``limit`` slots of ``key``; None (nothing taken) when all are held."""
        ...

    async def aclose(self) -> None: ...


class MemoryRequestSlots:
    """The slots of one process: a count per key, of keys with a slot held only."""

    def __init__(self) -> None:
        self._held: dict[str, int] = {}

    async def take(self, key: str, limit: int) -> Slot | None:
        held = self._held.get(key, 0)
        if held >= limit:
            return None
        self._held[key] = held + 1
        return Slot(partial(self._give_back, key))

    def held(self, key: str) -> int:
        """The slots of ``key`` held now."""
        return self._held.get(key, 0)

    def __len__(self) -> int:
        return len(self._held)

    async def aclose(self) -> None:
        self._held.clear()

    def _give_back(self, key: str) -> None:
        held = self._held.get(key, 0) - 1
        if held > 0:
            self._held[key] = held
        else:
            self._held.pop(key, None)
