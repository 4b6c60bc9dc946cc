"""Responses deleted for good once older than the retention, on SQLite and PostgreSQL:
finished ones only, with their items and event logs, a batch at a time; conversations
untouched.

The PostgreSQL database is shared with every other test, whose rows are created at 1.0
or later: these use earlier times, and cut off below 1.0, so a purge takes only theirs.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.util import await_only

from stateway.core.conversations.ports import Conversation
from stateway.core.ports import ConversationTurn, EventBatch, ResponseRecord
from stateway.storage.sql import SqlConversationStore, SqlResponseStore, open_store
from stateway.storage.sql.retention import SqlResponsePurger
from tests.storage.conftest import RecordFactory

CUTOFF = 0.75
"""Below every other test's ``created_at``."""


def at(row: ResponseRecord, created_at: float, status: str = "completed") -> ResponseRecord:
    return dataclasses.replace(row, created_at=created_at, status=status)


@pytest.fixture
async def purger(store: SqlResponseStore) -> SqlResponsePurger:
    purger = SqlResponsePurger(store)
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


async def test_a_sweep_walks_the_keys_once_and_the_next_starts_again(
    store: SqlResponseStore, purger: SqlResponsePurger, record: RecordFactory, tenant: str
) -> None:
    """Each batch searches after the last key the one before found (PostgreSQL would
    otherwise read every earlier batch's dead tuples again): a row added behind the walk
    waits for the next sweep, which starts from the first key."""
    for name in ("resp_b", "resp_c", "resp_d"):
        await store.save(at(record(name), 0.5))
    assert await purger.purge(CUTOFF, 2) == 2  # resp_b, resp_c
    await store.save(at(record("resp_a"), 0.5))  # behind the walk
    assert await purger.purge(CUTOFF, 2) == 1  # resp_d: the walk's end
    assert await store.get(tenant, "resp_a") is not None
    assert await purger.purge(CUTOFF, 2) == 1  # the next sweep
    assert await store.get(tenant, "resp_a") is None


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_a_response_another_sweep_deleted_first_is_not_counted(
    store: SqlResponseStore,
    purger: SqlResponsePurger,
    record: RecordFactory,
    tenant: str,
    database_url: str,
) -> None:
    """SQLite (PostgreSQL's sweeps never find the same rows: below), where processes
    sweeping side by side can find the same rows: one that
    found a response another deleted before it could counts only what it deleted itself
    (its log says so, and a batch left short ends its sweep)."""
    await store.save(at(record("resp_old"), 0.5))
    other = open_store(database_url)

    async def delete_there() -> None:
        async with other.engine.begin() as connection:
            await connection.execute(_DELETE_OLD, {"tenant": tenant})

    def meanwhile(_connection: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):  # the search for old rows
            await_only(delete_there())

    event.listen(store.engine.sync_engine, "after_cursor_execute", meanwhile)
    try:
        assert await purger.purge(CUTOFF, 100) == 0
    finally:
        event.remove(store.engine.sync_engine, "after_cursor_execute", meanwhile)
        await other.aclose()
    assert await store.get(tenant, "resp_old") is None


@pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
async def test_responses_another_sweep_holds_are_skipped_not_waited_for(
    store: SqlResponseStore,
    purger: SqlResponsePurger,
    record: RecordFactory,
    tenant: str,
    database_url: str,
) -> None:
    """PostgreSQL (SQLite has one writer at a time): processes sweeping side by side
    share the work, each batch finding
    rows no other sweep's transaction holds (rather than waiting for those, then finding
    them gone)."""
    await store.save(at(record("resp_old"), 0.5))
    other = open_store(database_url)
    try:
        async with other.engine.connect() as connection:
            await connection.execute(_HOLD_OLD, {"tenant": tenant})  # its batch, not ended
            assert await asyncio.wait_for(purger.purge(CUTOFF, 100), 5) == 0
            await connection.rollback()
    finally:
        await other.aclose()
    assert await purger.purge(CUTOFF, 100) == 1


_DELETE_OLD = text("DELETE FROM responses WHERE tenant_id = :tenant AND id = 'resp_old'")
_HOLD_OLD = text(
    "SELECT id FROM responses WHERE tenant_id = :tenant AND id = 'resp_old' FOR UPDATE"
)


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


async def test_a_conversation_whose_last_turn_is_gone_takes_the_next(
    store: SqlResponseStore, purger: SqlResponsePurger, record: RecordFactory, tenant: str
) -> None:
    """A turn lets its conversation go as it ends: the purge of its response leaves
    nothing holding it."""
    conversations = SqlConversationStore(store)
    await conversations.create(Conversation(tenant, "conv_old", 0.5, {}), [])
    turn = at(record("resp_old", inputs=["q"]), 0.5, "in_progress")
    turn.turn = ConversationTurn("conv_old")
    await store.save(turn)
    answered = ConversationTurn("conv_old", items=[*turn.input_items, *turn.output_items])
    await store.finish(dataclasses.replace(turn, status="completed", turn=answered))
    assert await purger.purge(CUTOFF, 100) == 1

    after = at(record("resp_after", inputs=["q2"]), 0.9, "in_progress")
    after.turn = ConversationTurn("conv_old", seen=1)
    await store.save(after)
    assert await store.get(tenant, "resp_after") is not None
