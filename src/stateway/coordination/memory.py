"""In-process command outcomes: an LRU bounded by count and by bytes, and claims as
futures.

The default of an embedded gateway. Nothing is shared with other processes: two
replicas behind a load balancer need the Redis adapters (a single process cancels its own
runs directly, so it has no cancel signals at all).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

from stateway.core.coordination import CommandKey, Outcome
from stateway.core.errors import IdempotencyKeyReused

DEFAULT_MAX_RESULTS: Final = 10_000
DEFAULT_MAX_RESULT_BYTES: Final = 256 * 1024 * 1024
DEFAULT_RESULT_TTL: Final = 24 * 3600.0


class MemoryCommandResults:
    """Outcomes of the last ``max_results`` commands whose answers hold ``max_bytes`` in
    all (least recently used dropped first: a retry of one dropped runs again; the newest
    is kept whatever its size, for the retry that comes soonest), each kept for ``ttl``
    seconds; claims under way by key."""

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
        self._bytes = 0
        """The answers' bytes held (:attr:`Outcome.body`)."""
        self._ttl = ttl
        self._clock = clock
        self._outcomes: OrderedDict[CommandKey, tuple[Outcome, float]] = OrderedDict()
        self._claims: dict[CommandKey, tuple[str, asyncio.Future[Outcome | None]]] = {}

    def __len__(self) -> int:
        return len(self._outcomes)

    async def ping(self) -> None:
        pass

    async def claim(self, key: CommandKey, fingerprint: str) -> Outcome | None:
        while True:
            outcome = self._outcome(key)
            if outcome is not None:
                return _checked(outcome.fingerprint, fingerprint, outcome)
            claim = self._claims.get(key)
            if claim is None:
                self._claims[key] = (fingerprint, asyncio.get_running_loop().create_future())
                return None
            _checked(claim[0], fingerprint, None)
            outcome = await asyncio.shield(claim[1])
            if outcome is not None:
                return outcome
            # That attempt failed: claim the key for this one.

    async def complete(self, key: CommandKey, outcome: Outcome) -> None:
        self._drop(key)
        self._outcomes[key] = (outcome, self._clock() + self._ttl)
        self._bytes += len(outcome.body)
        outcomes = self._outcomes
        while len(outcomes) > self._max or (self._bytes > self._max_bytes and len(outcomes) > 1):
            _, (dropped, _) = outcomes.popitem(last=False)
            self._bytes -= len(dropped.body)
        self._settle(key, outcome)

    async def release(self, key: CommandKey) -> None:
        self._settle(key, None)

    async def aclose(self) -> None:
        for _, waiting in self._claims.values():
            if not waiting.done():
                waiting.set_result(None)
        self._claims.clear()

    def _outcome(self, key: CommandKey) -> Outcome | None:
        found = self._outcomes.get(key)
        if found is None:
            return None
        outcome, expires = found
        if expires <= self._clock():
            self._drop(key)
            return None
        self._outcomes.move_to_end(key)
        return outcome

    def _drop(self, key: CommandKey) -> None:
        found = self._outcomes.pop(key, None)
        if found is not None:
            self._bytes -= len(found[0].body)

    def _settle(self, key: CommandKey, outcome: Outcome | None) -> None:
        claim = self._claims.pop(key, None)
        if claim is not None and not claim[1].done():
            claim[1].set_result(outcome)


def _checked(claimed: str, presented: str, outcome: Outcome | None) -> Outcome | None:
    if claimed != presented:
        raise IdempotencyKeyReused()
    return outcome
