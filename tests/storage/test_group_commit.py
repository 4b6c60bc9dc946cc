"""Concurrent saves share transactions; a bad save fails alone."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from stateway.core.errors import StorageError
from stateway.core.ports import ResponseRecord
from stateway.storage.sql import SqlResponseStore, queries
from tests.storage.test_queries import statements_written

RecordFactory = Callable[..., ResponseRecord]


async def test_concurrent_saves_share_statements(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    await store.ping()
    records = [record(f"r{n}", inputs=[f"q{n}"], outputs=[f"a{n}"]) for n in range(20)]
    with statements_written(store) as executed:
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
    assert results[1].message == "Storage rejected the data while saving a response."
    assert results[2] is None
    assert await store.get(tenant, "fine-1") is not None
    assert await store.get(tenant, "fine-2") is not None
    page = await store.list_input_items(tenant, "taken", after=None, limit=10, order="asc")
    assert page is not None
    assert page.items == [], "the failed save left no items behind"


async def test_a_rejected_save_of_two_fails_alone_too(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    await store.save(record("taken"))
    async with asyncio.timeout(10):  # a save left unanswered would wait for ever
        results = await asyncio.gather(
            store.save(record("taken", inputs=["dup"])),
            store.save(record("fine")),
            return_exceptions=True,
        )
    assert isinstance(results[0], StorageError)
    assert results[0].message == "Storage rejected the data while saving a response."
    assert results[1] is None
    assert await store.get(tenant, "fine") is not None


async def test_a_lone_rejected_save_says_so(
    store: SqlResponseStore, record: RecordFactory, caplog: pytest.LogCaptureFixture
) -> None:
    await store.save(record("taken"))
    with pytest.raises(StorageError) as caught:
        await store.save(record("taken"))
    assert caught.value.message == "Storage rejected the data while saving a response."
    assert not [r for r in caplog.records if r.name == "stateway.storage.sql.group_commit"]


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
    store: SqlResponseStore,
    record: RecordFactory,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken(batch: object) -> None:
        raise RuntimeError("a bug in the writer")

    monkeypatch.setattr(store._writes, "_write", broken)
    async with asyncio.timeout(10):  # a save left unanswered would wait for ever
        results = await asyncio.gather(
            *(store.save(record(f"b{n}")) for n in range(3)), return_exceptions=True
        )
    assert [type(result) for result in results] == [StorageError] * 3
    assert {str(result) for result in results} == {"Storage failed while saving a response."}
    logged = [r for r in caplog.records if r.name == "stateway.storage.sql.group_commit"]
    assert [r.getMessage() for r in logged] == ["writing 3 responses failed"]
    assert logged[0].exc_info is not None


async def test_a_cancelled_writer_answers_its_batch_and_closes_quietly(
    store: SqlResponseStore, record: RecordFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer task is cancelled only as the event loop shuts down: the saves it was
    writing are answered, and closing the store afterwards does not raise."""
    writing = asyncio.Event()

    async def stuck(batch: object) -> None:
        writing.set()
        await asyncio.Event().wait()

    monkeypatch.setattr(store._writes, "_write", stuck)
    save = asyncio.create_task(store.save(record("stuck")))
    await writing.wait()
    writer = store._writes._writer
    assert writer is not None
    writer.cancel()
    async with asyncio.timeout(10):  # a save left unanswered would wait for ever
        with pytest.raises(StorageError, match=r"^Storage failed while saving a response"):
            await save
    await store.aclose()


async def test_a_statement_outside_the_write_order_is_refused(store: SqlResponseStore) -> None:
    with pytest.raises(ValueError, match="write order"):
        await store._writes.write({queries.SOFT_DELETE: [{}]})
