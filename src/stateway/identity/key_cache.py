"""Keys as the gateway reads them: through a short-lived cache over the key store.

Every request names its key, so looking each one up in the database would add a round
trip to every request; the cache keeps what the store answered (a key, or that there
is none) for ``ttl`` seconds. That is how long a key created by ``stateway keys create``
may wait to be accepted, and how long a revoked one may still be: a revocation or a new
key written by another process reaches this one when its entry expires. Concurrent
requests that miss on the same key share one query.

Keys the store knows and digests it does not are remembered apart, each bounded (the
least recently loaded go first): an unauthenticated client can send any number of
made-up keys, each costing one lookup, and were their answers kept with the real keys a
flood of them would push every real key out, sending each real request back to the
store. Made up, they only push out one another; the real keys stay until their ``ttl``.
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
"""Keys the store knows, remembered at once."""
MAX_UNKNOWN: Final = 1_000
"""Digests the store does not know, remembered at once: enough for a client that keeps
sending a wrong key to be answered from memory."""


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
        max_unknown: int = MAX_UNKNOWN,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._ttl = ttl
        self._clock = clock
        self._known = _Entries(max_entries)
        self._unknown = _Entries(max_unknown)
        self._loading: dict[str, asyncio.Future[ApiKey | None]] = {}

    async def find(self, digest: str) -> ApiKey | None:
        """The key with this digest as the store knew it at most ``ttl`` seconds ago.
        Raises ``StorageError`` when the store cannot be read."""
        entry = self._known.get(digest) or self._unknown.get(digest)
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
        entry = _Entry(key, self._clock())
        (self._known if key is not None else self._unknown).put(digest, entry)
        (self._unknown if key is not None else self._known).drop(digest)
        return key


class _Entries:
    """Entries in the order they were loaded, at most ``limit`` of them."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._entries: dict[str, _Entry] = {}

    def get(self, digest: str) -> _Entry | None:
        return self._entries.get(digest)

    def put(self, digest: str, entry: _Entry) -> None:
        self._entries.pop(digest, None)
        self._entries[digest] = entry
        while len(self._entries) > self._limit:
            del self._entries[next(iter(self._entries))]

    def drop(self, digest: str) -> None:
        self._entries.pop(digest, None)
