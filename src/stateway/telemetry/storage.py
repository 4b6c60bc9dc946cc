"""The response store, timed: each call's seconds observed by operation.

:class:`TimedStore` is the :class:`~stateway.core.ports.ResponseStore` the gateway is given
(``app/gateway.py``): it forwards every call and reports how long it took,
failures included, as ``stateway_storage_duration_seconds{operation}`` (``save``,
``finish``, ``get``, ``load_context``, ...). What is timed is what the gateway waits for:
a write's turn in a group commit included.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import Literal, TypeVar

from stateway.core.items import Item
from stateway.core.ports import (
    EventBatch,
    EventLog,
    ItemPage,
    ResponseRecord,
    ResponseStore,
    StoredChain,
)

T = TypeVar("T")

Observe = Callable[[str, float], None]
"""Told each operation's name and its seconds."""


class TimedStore:
    def __init__(self, store: ResponseStore, observe: Observe) -> None:
        self._store = store
        self._observe = observe

    async def _timed(self, operation: str, call: Awaitable[T]) -> T:
        started = perf_counter()
        try:
            return await call
        finally:
            self._observe(operation, perf_counter() - started)

    async def save(self, record: ResponseRecord) -> None:
        await self._timed("save", self._store.save(record))

    async def finish(self, record: ResponseRecord) -> bool:
        return await self._timed("finish", self._store.finish(record))

    async def in_progress(self) -> list[ResponseRecord]:
        return await self._timed("in_progress", self._store.in_progress())

    async def append_events(self, tenant_id: str, response_id: str, batch: EventBatch) -> None:
        await self._timed("append_events", self._store.append_events(tenant_id, response_id, batch))

    async def read_events(self, tenant_id: str, response_id: str, after: int) -> EventLog | None:
        return await self._timed(
            "read_events", self._store.read_events(tenant_id, response_id, after)
        )

    async def get(self, tenant_id: str, response_id: str) -> ResponseRecord | None:
        return await self._timed("get", self._store.get(tenant_id, response_id))

    async def load_context(self, tenant_id: str, response_id: str) -> StoredChain | None:
        return await self._timed("load_context", self._store.load_context(tenant_id, response_id))

    async def find_items(self, tenant_id: str, item_ids: list[str]) -> dict[str, Item]:
        return await self._timed("find_items", self._store.find_items(tenant_id, item_ids))

    async def delete(self, tenant_id: str, response_id: str) -> bool:
        return await self._timed("delete", self._store.delete(tenant_id, response_id))

    async def list_input_items(
        self,
        tenant_id: str,
        response_id: str,
        *,
        after: str | None,
        limit: int,
        order: Literal["asc", "desc"],
    ) -> ItemPage | None:
        page = self._store.list_input_items(
            tenant_id, response_id, after=after, limit=limit, order=order
        )
        return await self._timed("list_input_items", page)

    async def ping(self) -> None:
        await self._timed("ping", self._store.ping())

    async def aclose(self) -> None:
        await self._store.aclose()
