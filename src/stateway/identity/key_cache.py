"""Keys as the gateway reads them: through a short-lived cache over the key store.

Every request names its key, so looking each one up in the database would add a round
trip to every request; the cache keeps what the store answered (a key, or that there
is none) for ``ttl`` seconds. That is how long a key created by ``stateway keys create``
may wait to be accepted, and how long a revoked one may still be: a revocation or a new
key written by another process reaches this one when its entry expires. Concurrent
requests that miss on the same key share one query. The cache holds at most
``max_entries`` keys (the least recently loaded go first), so a flood of made-up keys
cannot grow it without bound.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Final

from stateway.identity.keys import ApiKey, KeyStore

MAX_ENTRIES: Final = 10_000


@dataclass(frozen=True, slots=True)
class _Entry:
    key: ApiKey | None
    loaded_at: float


class KeyCache:
    def __init__(
        self,
        store: KeyStore,
        ttl: float,
        *,
        max_entries: int = MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._ttl = ttl
        self._max = max_entries
        self._clock = clock
        self._entries: dict[str, _Entry] = {}
        self._loading: dict[str, asyncio.Future[ApiKey | None]] = {}

    async def find(self, digest: str) -> ApiKey | None:
        """The key with this digest as the store knew it at most ``ttl`` seconds ago.
        Raises ``StorageError`` when the store cannot be read."""
        entry = self._entries.get(digest)
        if entry is not None and self._clock() - entry.loaded_at < self._ttl:
            return entry.key
        loading = self._loading.get(digest)
        if loading is None:
            loading = asyncio.ensure_future(self._load(digest))
            self._loading[digest] = loading
            loading.add_done_callback(partial(self._loaded, digest))
        return await asyncio.shield(loading)

    def _loaded(self, digest: str, loading: asyncio.Future[ApiKey | None]) -> None:
        del self._loading[digest]
        if not loading.cancelled():
            loading.exception()  # retrieved: every waiter that is left gets it raised

    async def _load(self, digest: str) -> ApiKey | None:
        key = await self._store.find(digest)
        self._entries.pop(digest, None)
        self._entries[digest] = _Entry(key, self._clock())
        while len(self._entries) > self._max:
            del self._entries[next(iter(self._entries))]
        return key
