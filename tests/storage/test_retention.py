"""Responses deleted for good once older than the retention, on SQLite and PostgreSQL:
finished ones only, with their items and event logs, a batch at a time; conversations
untouched.

The PostgreSQL database is shared with every other test, whose rows are created at 1.0
or later: these use earlier times, and cut off below 1.0, so a purge takes only theirs.
"""

from __future__ import annotations

import dataclasses

import pytest

from stateway.core.conversations.ports import Conversation
from stateway.core.ports import EventBatch, ResponseRecord
from stateway.storage.sql import SqlConversationStore, SqlResponseStore
from stateway.storage.sql.retention import SqlResponsePurger
from tests.storage.conftest import RecordFactory

CUTOFF = 0.75
"""Below every other test's ``created_at``."""


def at(row: ResponseRecord, created_at: float, status: str = "completed") -> ResponseRecord:
    return dataclasses.replace(row, created_at=created_at, status=status)


@pytest.fixture
async def purger(store: SqlResponseStore) -> SqlResponsePurger:
    purger = SqlResponsePurger(store.engine)
    await purger.purge(CUTOFF, 10_000)  # what an interrupted earlier run left
    return purger


async def test_an_old_finished_response_goes_with_its_items_and_event_log(
    store: SqlResponseStore, purger: SqlResponsePurger, record: RecordFactory, tenant: str
) -> None:
    old = at(record("resp_old", inputs=["q"], outputs=["a"]), 0.5)
    old.events = EventBatch(0, [b'{"type":"response.created","sequence_number":0}'])
    await store.save(old)
    await store.save(at(record("resp_new", "resp_old", inputs=["q2"], outputs=["a2"]), 0.9))
    assert await purger.purge(CUTOFF, 100) == 1
    assert await store.get(tenant, "resp_old") is None
    assert await store.read_events(tenant, "resp_old", -1) is None
    # the chain continuing from it keeps its own items: the walk ends where one is missing
    chain = await store.load_context(tenant, "resp_new")
    assert chain is not None
    assert [item["content"][0]["text"] for item in chain.items] == ["q2", "a2"]
    async with store.engine.connect() as connection:
        left = await connection.exec_driver_sql(
            f"SELECT count(*) FROM items WHERE tenant_id = '{tenant}'"
        )
        assert left.scalar_one() == 2


async def test_a_deleted_one_goes_too_and_an_unfinished_one_stays_however_old(
    store: SqlResponseStore, purger: SqlResponsePurger, record: RecordFactory, tenant: str
) -> None:
    await store.save(at(record("resp_deleted"), 0.5))
    assert await store.delete(tenant, "resp_deleted")
    running = at(record("resp_running"), 0.25, "in_progress")
    running.owner = "host 1 2"
    await store.save(running)
    await store.save(at(record("resp_queued"), 0.25, "queued"))
    assert await purger.purge(CUTOFF, 100) == 1
    unfinished = {row.id for row in await store.in_progress() if row.tenant_id == tenant}
    assert unfinished == {"resp_running", "resp_queued"}
    async with store.engine.connect() as connection:
        gone = await connection.exec_driver_sql(
            f"SELECT count(*) FROM responses WHERE tenant_id = '{tenant}' AND id = 'resp_deleted'"
        )
        assert gone.scalar_one() == 0


async def test_a_batch_deletes_at_most_its_limit(
    store: SqlResponseStore, purger: SqlResponsePurger, record: RecordFactory
) -> None:
    for n in range(3):
        await store.save(at(record(f"resp_{n}", inputs=["q"]), 0.5))
    assert await purger.purge(CUTOFF, 2) == 2
    assert await purger.purge(CUTOFF, 2) == 1
    assert await purger.purge(CUTOFF, 2) == 0


async def test_conversations_and_their_items_are_kept(
    store: SqlResponseStore, purger: SqlResponsePurger, tenant: str
) -> None:
    conversations = SqlConversationStore(store)
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "k"}]}
    await conversations.create(Conversation(tenant, "conv_old", 0.5, {}), [item])
    await purger.purge(CUTOFF, 100)
    assert await conversations.get(tenant, "conv_old") is not None
    page = await conversations.list_items(tenant, "conv_old", after=None, limit=10, order="asc")
    assert page is not None
    assert [i["content"][0]["text"] for i in page.items] == ["k"]
