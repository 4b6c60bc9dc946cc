"""Background runs' event logs: appended in batches, finished with the run, read by range."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from stateway.core.errors import StorageError
from stateway.core.ports import EventBatch, ResponseRecord
from stateway.storage.sql import SqlResponseStore
from tests.storage.conftest import RecordFactory
from tests.storage.test_queries import statements_written


def running(record: RecordFactory, response_id: str, status: str = "in_progress") -> ResponseRecord:
    row = record(response_id, inputs=["q"], body={"id": response_id, "background": True})
    row.status, row.owner = status, "host 1 2"
    return row


def payloads(start: int, end: int) -> list[bytes]:
    """Wire payloads: text with spaces, non-ASCII and an escaped line break included."""
    body = '{"type":"e","sequence_number":%d,"text":"a \u00e9 \u6f22\\n"}'
    return [(body % n).encode() for n in range(start, end)]


def batch(start: int, end: int) -> EventBatch:
    return EventBatch(start, payloads(start, end))


def finished(row: ResponseRecord, status: str, log: EventBatch) -> ResponseRecord:
    body = {**row.body, "status": status}
    return dataclasses.replace(row, status=status, body=body, input_items=[], events=log)


async def test_a_log_is_read_after_any_position_across_its_batches(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    row = running(record, "r1")
    await store.save(row)
    await store.append_events(tenant, "r1", batch(0, 3))
    await store.append_events(tenant, "r1", batch(3, 5))
    await store.finish(finished(row, "completed", batch(5, 8)))

    for after in range(-1, 9):
        log = await store.read_events(tenant, "r1", after)
        assert log is not None
        assert (log.status, log.background, log.last) == ("completed", True, 7)
        assert log.events.payloads == payloads(after + 1, 8), after
        if log.events.payloads:
            assert log.events.first == after + 1


async def test_a_log_is_read_apart_from_the_logs_beside_it(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    """The batch holding event ``after + 1`` is found among the response's own batches: a
    log beside it (of another response, or another tenant's of the same id) whose batches
    start elsewhere moves no read past events it must return."""
    row = running(record, "r1")
    foreign = dataclasses.replace(running(record, "r1"), tenant_id=f"{tenant}-other")
    beside = [running(record, "r2"), foreign]
    for saved in (row, *beside):
        await store.save(saved)
    await store.append_events(tenant, "r1", batch(0, 3))
    await store.append_events(tenant, "r1", batch(3, 6))
    for other in beside:
        for start in range(6):  # a batch starting at every event
            await store.append_events(other.tenant_id, other.id, batch(start, start + 1))

    for after in range(-1, 6):
        log = await store.read_events(tenant, "r1", after)
        assert log is not None
        assert log.events.payloads == payloads(after + 1, 6), after


async def test_a_running_response_reads_what_is_logged_so_far(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    await store.save(running(record, "r1"))
    empty = await store.read_events(tenant, "r1", -1)
    assert empty is not None
    assert (empty.status, empty.last, empty.events.payloads) == ("in_progress", -1, [])
    await store.append_events(tenant, "r1", batch(0, 2))
    log = await store.read_events(tenant, "r1", 0)
    assert log is not None
    assert (log.status, log.last, log.events) == ("in_progress", 1, batch(1, 2))


async def test_a_response_without_a_log_reads_as_empty(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    await store.save(record("plain", inputs=["q"]))
    log = await store.read_events(tenant, "plain", -1)
    assert log is not None
    assert (log.status, log.background, log.last) == ("completed", False, -1)
    assert log.events.payloads == []


async def test_an_unknown_deleted_or_foreign_response_has_no_log(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    await store.save(running(record, "r1"))
    await store.append_events(tenant, "r1", batch(0, 2))
    assert await store.read_events("someone-else", "r1", -1) is None
    assert await store.read_events(tenant, "missing", -1) is None
    assert await store.read_events(tenant, "r\x00", -1) is None
    await store.delete(tenant, "r1")
    assert await store.read_events(tenant, "r1", -1) is None


async def test_a_batch_starting_where_another_did_is_refused(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    await store.save(running(record, "r1"))
    await store.append_events(tenant, "r1", batch(0, 2))
    with pytest.raises(StorageError):
        await store.append_events(tenant, "r1", batch(0, 3))
    log = await store.read_events(tenant, "r1", -1)
    assert log is not None
    assert log.events == batch(0, 2), "the refused batch left nothing behind"


async def test_a_log_needs_its_response(store: SqlResponseStore, tenant: str) -> None:
    with pytest.raises(StorageError):
        await store.append_events(tenant, "nobody", batch(0, 1))


async def test_a_queued_response_counts_as_unfinished(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    row = running(record, "queued", status="queued")
    await store.save(row)
    assert "queued" in {r.id for r in await store.in_progress() if r.tenant_id == tenant}

    await store.finish(finished(row, "failed", batch(0, 1)))

    log = await store.read_events(tenant, "queued", -1)
    assert log is not None
    assert (log.status, log.events) == ("failed", batch(0, 1))
    assert "queued" not in {r.id for r in await store.in_progress() if r.tenant_id == tenant}


async def test_batches_of_several_runs_and_their_ends_share_one_transaction(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    rows = [running(record, f"r{n}") for n in range(4)]
    await asyncio.gather(*(store.save(row) for row in rows))
    with statements_written(store) as executed:
        await asyncio.gather(
            *(store.append_events(tenant, row.id, batch(0, 500)) for row in rows[:2]),
            *(store.finish(finished(row, "completed", batch(0, 3))) for row in rows[2:]),
        )
    # one (executemany) update of the ends, one insert of the four batches: one row each
    assert [sql.split()[0] for sql in executed] == ["UPDATE", "INSERT"]
    for row in rows:
        log = await store.read_events(tenant, row.id, -1)
        assert log is not None
        assert len(log.events.payloads) == (500 if row in rows[:2] else 3)
