"""Concurrent saves share transactions; a bad save fails alone."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from stateway.core.errors import StorageError
from stateway.core.ports import ResponseRecord
from stateway.storage.sql import SqlResponseStore, queries
from tests.storage.test_queries import statements

RecordFactory = Callable[..., ResponseRecord]


async def test_concurrent_saves_share_statements(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    await store.ping()
    records = [record(f"r{n}", inputs=[f"q{n}"], outputs=[f"a{n}"]) for n in range(20)]
    with statements(store.write_engine) as executed:
        await asyncio.gather(*(store.save(r) for r in records))
    assert len(executed) < 2 * len(records), "saves that arrive together are batched"
    for n in range(20):
        stored = await store.get(tenant, f"r{n}")
        assert stored is not None
        assert stored.output_items[0]["content"][0]["text"] == f"a{n}"


async def test_a_bad_save_fails_alone(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    await store.save(record("taken"))
    batch = [record("fine-1", inputs=["x"]), record("taken", inputs=["dup"]), record("fine-2")]
    results = await asyncio.gather(*(store.save(r) for r in batch), return_exceptions=True)
    assert results[0] is None
    assert isinstance(results[1], StorageError)
    assert results[2] is None
    assert await store.get(tenant, "fine-1") is not None
    assert await store.get(tenant, "fine-2") is not None
    page = await store.list_input_items(tenant, "taken", after=None, limit=10, order="asc")
    assert page is not None
    assert page.items == [], "the failed save left no items behind"


async def test_a_cancelled_caller_does_not_lose_the_write(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    task = asyncio.create_task(store.save(record("cancelled", outputs=["a"])))
    await asyncio.sleep(0)  # let it queue
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await store.aclose()  # drains the writer; the disposed engine reconnects on demand
    assert await store.get(tenant, "cancelled") is not None


async def test_an_unexpected_failure_still_answers_every_waiting_save(
    store: SqlResponseStore, record: RecordFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(batch: object) -> None:
        raise RuntimeError("a bug in the writer")

    monkeypatch.setattr(store._writes, "_write", broken)
    results = await asyncio.gather(
        *(store.save(record(f"b{n}")) for n in range(3)), return_exceptions=True
    )
    assert all(isinstance(result, StorageError) for result in results)


async def test_a_statement_outside_the_write_order_is_refused(store: SqlResponseStore) -> None:
    with pytest.raises(ValueError, match="write order"):
        await store._writes.write({queries.SOFT_DELETE: [{}]})
