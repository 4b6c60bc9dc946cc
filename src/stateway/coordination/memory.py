"""In-process command outcomes: bounded by count and by bytes, least recently used first
within each tenant, and claims as futures.

Past a bound, the outcome dropped is the least recently used of the tenant holding the
most (outcomes past ``max_results``, their answers' bytes past ``max_bytes``): a tenant
sending keyed requests without end (a conversation made with an ``Idempotency-Key`` costs
no model call and no rate limit) pushes out its own outcomes once it holds more than any
other, never every other tenant's, whose retries would then run their commands again.

The default of an embedded gateway. Nothing is shared with other processes: two
replicas behind a load balancer need the Redis adapters (a single process cancels its own
runs directly, so it has no cancel signals at all).
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from stateway.core.coordination import CommandKey, Outcome
from stateway.core.errors import IdempotencyKeyReused

DEFAULT_MAX_RESULTS: Final = 10_000
DEFAULT_MAX_RESULT_BYTES: Final = 256 * 1024 * 1024
DEFAULT_RESULT_TTL: Final = 24 * 3600.0


@dataclass(slots=True, eq=False)
class _Held:
    """One tenant's outcomes, least recently used first, and their answers' bytes."""

    outcomes: OrderedDict[CommandKey, tuple[Outcome, float]] = field(default_factory=OrderedDict)
    bytes: int = 0


class _Ranking:
    """Tenants by an amount they hold, the most first, found in logarithmic time however
    many there are: a heap of ``(-amount, tenant)`` pushed at each change, an entry no
    longer current dropped when it comes up, the whole rebuilt once stale entries
    outnumber the tenants."""

    __slots__ = ("_amount", "_heap")

    def __init__(self, amount: Callable[[_Held], int]) -> None:
        self._amount = amount
        self._heap: list[tuple[int, str]] = []

    def note(self, tenant: str, tenants: dict[str, _Held]) -> None:
        """What ``tenant`` holds changed (``tenants``: every tenant's, as it is now)."""
        held, heap = tenants.get(tenant), self._heap
        if held is not None:
            heapq.heappush(heap, (-self._amount(held), tenant))
        if len(heap) > 2 * len(tenants) + 16:
            heap[:] = [(-self._amount(held), name) for name, held in tenants.items()]
            heapq.heapify(heap)

    def most(self, tenants: dict[str, _Held], spared: str | None) -> _Held:
        """The outcomes of the tenant holding the most, but ``spared``; there is one."""
        heap = self._heap
        passed = None
        while True:
            amount, tenant = heap[0]
            held = tenants.get(tenant)
            current = held is not None and -amount == self._amount(held)
            if held is not None and current and tenant != spared:
                if passed is not None:
                    heapq.heappush(heap, passed)
                return held
            popped = heapq.heappop(heap)  # stale, or ``spared``'s: put back after
            if current:
                passed = popped


class MemoryCommandResults:
    """Outcomes of at most ``max_results`` commands whose answers hold ``max_bytes`` in
    all (beyond, the least recently used of the tenant holding the most is dropped: a
    retry of one dropped runs again; the newest is kept whatever its size, for the retry
    that comes soonest), each kept for ``ttl`` seconds; claims under way by key."""

    shared = False

    def __init__(
        self,
        max_results: int = DEFAULT_MAX_RESULTS,
        ttl: float = DEFAULT_RESULT_TTL,
        clock: Callable[[], float] = time.monotonic,
        *,
        max_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    ) -> None:
        self._max = max_results
        self._max_bytes = max_bytes
        self._count = 0
        self._bytes = 0
        """The answers' bytes held (:attr:`Outcome.body`)."""
        self._ttl = ttl
        self._clock = clock
        self._held: dict[str, _Held] = {}
        """Each tenant's outcomes (a tenant holding none has no entry)."""
        self._most_outcomes = _Ranking(lambda held: len(held.outcomes))
        self._most_bytes = _Ranking(lambda held: held.bytes)
        self._claims: dict[CommandKey, tuple[str, asyncio.Future[Outcome | None]]] = {}

    def __len__(self) -> int:
        return self._count

    async def ping(self) -> None:
        pass

    async def claim(
        self, key: CommandKey, fingerprint: str, waiting: Callable[[], None] | None = None
    ) -> Outcome | None:
        while True:
            outcome = self._outcome(key)
            if outcome is not None:
                return _checked(outcome.fingerprint, fingerprint, outcome)
            claim = self._claims.get(key)
            if claim is None:
                self._claims[key] = (fingerprint, asyncio.get_running_loop().create_future())
                return None
            _checked(claim[0], fingerprint, None)
            if waiting is not None:
                waiting()
                waiting = None
            outcome = await asyncio.shield(claim[1])
            if outcome is not None:
                return outcome
            # That attempt failed: claim the key for this one.

    async def complete(self, key: CommandKey, outcome: Outcome) -> None:
        self._drop(key)
        held = self._held.setdefault(key.tenant_id, _Held())
        held.outcomes[key] = (outcome, self._clock() + self._ttl)
        held.bytes += len(outcome.body)
        self._count += 1
        self._bytes += len(outcome.body)
        self._changed(key.tenant_id)
        while self._count > self._max or (self._bytes > self._max_bytes and self._count > 1):
            # The newest is kept: its tenant is passed over while it holds nothing else.
            spared = key.tenant_id if len(held.outcomes) == 1 else None
            ranking = self._most_outcomes if self._count > self._max else self._most_bytes
            self._drop(next(iter(ranking.most(self._held, spared).outcomes)))
        self._settle(key, outcome)

    def _changed(self, tenant: str) -> None:
        self._most_outcomes.note(tenant, self._held)
        self._most_bytes.note(tenant, self._held)

    async def release(self, key: CommandKey) -> None:
        self._settle(key, None)

    async def aclose(self) -> None:
        for _, waiting in self._claims.values():
            if not waiting.done():
                waiting.set_result(None)
        self._claims.clear()

    def _outcome(self, key: CommandKey) -> Outcome | None:
        held = self._held.get(key.tenant_id)
        found = None if held is None else held.outcomes.get(key)
        if held is None or found is None:
            return None
        outcome, expires = found
        if expires <= self._clock():
            self._drop(key)
            return None
        held.outcomes.move_to_end(key)
        return outcome

    def _drop(self, key: CommandKey) -> None:
        held = self._held.get(key.tenant_id)
        found = None if held is None else held.outcomes.pop(key, None)
        if held is None or found is None:
            return
        held.bytes -= len(found[0].body)
        self._count -= 1
        self._bytes -= len(found[0].body)
        if not held.outcomes:
            del self._held[key.tenant_id]
        self._changed(key.tenant_id)

    def _settle(self, key: CommandKey, outcome: Outcome | None) -> None:
        claim = self._claims.pop(key, None)
        if claim is not None and not claim[1].done():
            claim[1].set_result(outcome)


def _checked(claimed: str, presented: str, outcome: Outcome | None) -> Outcome | None:
    if claimed != presented:
        raise IdempotencyKeyReused()
    return outcome
