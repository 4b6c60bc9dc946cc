"""Concurrent model requests per principal (``[rate_limits] concurrent_requests``).

A model request (what :class:`~stateway.core.limits.RateLimits` admits) takes one of its
principal's slots when it is admitted and gives it back when what it started ends: a run
when it ends (a background one holds it to its end; a stream whose client left ends when
its run does), a relayed Chat Completions answer when its relay closes, a compaction when
it returns; a request refused or failing before any of those exists gives it back at
once. :meth:`Gateway.execute <stateway.core.gateway.Gateway.execute>` is the one place that
takes and hands over each slot; a :class:`Slot` is given back once, however many times
:meth:`Slot.release` is called.

The slots live behind :class:`RequestSlots`: :class:`MemoryRequestSlots` counts them in
process (one gateway); :mod:`stateway.coordination.request_slots` keeps them in Redis,
shared by every replica, each held under a lease its process renews.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Protocol


class Slot:
    """One slot held by a model request. :meth:`release` gives it back the first time it
    is called, and does nothing after."""

    __slots__ = ("_give_back",)

    def __init__(self, give_back: Callable[[], None] | None = None) -> None:
        """``give_back`` frees it where it is kept (None: a slot nothing keeps, handed out
        while its store cannot be asked)."""
        self._give_back = give_back

    @property
    def held(self) -> bool:
        return self._give_back is not None

    def release(self) -> None:
        give_back, self._give_back = self._give_back, None
        if give_back is not None:
            give_back()


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
