"""Responses deleted for good once older than the retention, on SQLite and PostgreSQL:
finished ones only, with their items and event logs, a batch at a time; live conversations
untouched. Deleted conversations erased for good with their items, unless a running turn
holds one.

The PostgreSQL database is shared with every other test, whose rows are created at 1.0
or later: these use earlier times, and cut off below 1.0, so a purge takes only theirs.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.util import await_only

from stateway.core.conversations.ports import Conversation
from stateway.core.ports import ConversationTurn, EventBatch, ResponseRecord
from stateway.storage.sql import SqlConversationStore, SqlResponseStore, migrate, open_store
from stateway.storage.sql.retention import SqlConversationPurger, SqlResponsePurger
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


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def own_url(request: pytest.FixtureRequest, sqlite_url: str) -> str:
    """A database of the test's own: every gateway sweeping the PostgreSQL database the
    suite shares erases the deleted conversations it finds there, whenever deleted."""
    if request.param == "sqlite":
        return sqlite_url
    url: str = request.getfixturevalue("fresh_postgres_url")
    return url


@pytest.fixture
async def own_store(own_url: str) -> AsyncIterator[SqlResponseStore]:
    await migrate(own_url)
    sql_store = open_store(own_url)
    yield sql_store
    await sql_store.aclose()


@pytest.fixture
def erasure(own_store: SqlResponseStore) -> SqlConversationPurger:
    return SqlConversationPurger(own_store)


ITEM = {
    "id": "msg_secret",
    "type": "message",
    "role": "user",
    "content": [{"type": "input_text", "text": "secret"}],
}


async def deleted_at(store: SqlResponseStore, tenant: str, conversation_id: str, at: float) -> None:
    """Delete the conversation as a client does, then date its deletion ``at``."""
    assert await SqlConversationStore(store).delete(tenant, conversation_id)
    async with store.engine.begin() as connection:
        await connection.execute(
            _DATE_DELETION, {"tenant": tenant, "id": conversation_id, "at": at}
        )


async def rows_of(store: SqlResponseStore, tenant: str) -> tuple[set[str], set[str]]:
    """The tenant's conversations and the conversations its item rows belong to."""
    async with store.engine.connect() as connection:
        found = await connection.execute(_CONVERSATIONS, {"tenant": tenant})
        conversations = set(found.scalars())
        found = await connection.execute(_ITEMS_OF, {"tenant": tenant})
        return conversations, set(found.scalars())


_DATE_DELETION = text(
    "UPDATE conversations SET deleted_at = :at WHERE tenant_id = :tenant AND id = :id"
)
_CONVERSATIONS = text("SELECT id FROM conversations WHERE tenant_id = :tenant")
_ITEMS_OF = text("SELECT conversation_id FROM conversation_items WHERE tenant_id = :tenant")


async def test_a_deleted_conversation_is_erased_with_its_items(
    own_store: SqlResponseStore, erasure: SqlConversationPurger, tenant: str
) -> None:
    conversations = SqlConversationStore(own_store)
    for name in ("conv_deleted", "conv_later", "conv_live"):
        await conversations.create(Conversation(tenant, name, 0.25, {}), [ITEM, ITEM])
    assert await conversations.delete_item(tenant, "conv_deleted", "msg_secret")  # a tombstone
    await deleted_at(own_store, tenant, "conv_deleted", 0.5)
    await deleted_at(own_store, tenant, "conv_later", 0.9)  # after the cutoff: the next sweep's
    assert await erasure.purge(CUTOFF, 100) == 1
    assert await rows_of(own_store, tenant) == ({"conv_later", "conv_live"},) * 2
    assert await erasure.purge(0.95, 100) == 1
    assert await rows_of(own_store, tenant) == ({"conv_live"},) * 2


async def test_one_a_running_turn_holds_stays_until_the_turn_ends(
    own_store: SqlResponseStore, erasure: SqlConversationPurger, record: RecordFactory, tenant: str
) -> None:
    """A turn running when its conversation is deleted ends normally (ADR 0006): its end
    finds the conversation's row, lets go of it and appends nothing; the next sweep erases
    it."""
    conversations = SqlConversationStore(own_store)
    await conversations.create(Conversation(tenant, "conv_held", 0.25, {}), [ITEM])
    turn = at(record("resp_turn", inputs=["q"]), 0.5, "in_progress")
    turn.turn = ConversationTurn("conv_held", seen=1)
    await own_store.save(turn)
    await deleted_at(own_store, tenant, "conv_held", 0.5)
    assert await erasure.purge(CUTOFF, 100) == 0
    assert await rows_of(own_store, tenant) == ({"conv_held"},) * 2
    answered = ConversationTurn("conv_held", seen=1, items=[*turn.input_items])
    await own_store.finish(dataclasses.replace(turn, status="completed", turn=answered))
    assert await own_store.get(tenant, "resp_turn") is not None
    assert await erasure.purge(CUTOFF, 100) == 1
    assert await rows_of(own_store, tenant) == (set(), set())


async def test_an_erasing_batch_takes_at_most_its_limit_and_walks_once(
    own_store: SqlResponseStore, erasure: SqlConversationPurger, tenant: str
) -> None:
    """Each batch searches after the last one it found, in the order of deletion: one
    deleted behind the walk waits for the next sweep."""
    conversations = SqlConversationStore(own_store)
    for n, name in enumerate(("conv_b", "conv_c", "conv_d", "conv_a")):
        await conversations.create(Conversation(tenant, name, 0.25, {}), [ITEM])
        if name != "conv_a":
            await deleted_at(own_store, tenant, name, 0.5 + n / 100)
    assert await erasure.purge(CUTOFF, 2) == 2  # conv_b, conv_c
    await deleted_at(own_store, tenant, "conv_a", 0.4)  # behind the walk
    assert await erasure.purge(CUTOFF, 2) == 1  # conv_d: the walk's end
    assert (await rows_of(own_store, tenant))[0] == {"conv_a"}
    assert await erasure.purge(CUTOFF, 2) == 1  # the next sweep
    assert await rows_of(own_store, tenant) == (set(), set())


@pytest.mark.parametrize(
    "own_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
async def test_conversations_another_sweep_holds_are_skipped_not_waited_for(
    own_store: SqlResponseStore, erasure: SqlConversationPurger, tenant: str, own_url: str
) -> None:
    conversations = SqlConversationStore(own_store)
    await conversations.create(Conversation(tenant, "conv_old", 0.25, {}), [ITEM])
    await deleted_at(own_store, tenant, "conv_old", 0.5)
    other = open_store(own_url)
    try:
        async with other.engine.connect() as connection:
            await connection.execute(_HOLD_CONVERSATION, {"tenant": tenant})
            assert await asyncio.wait_for(erasure.purge(CUTOFF, 100), 5) == 0
            await connection.rollback()
    finally:
        await other.aclose()
    assert await erasure.purge(CUTOFF, 100) == 1


_HOLD_CONVERSATION = text(
    "SELECT id FROM conversations WHERE tenant_id = :tenant AND id = 'conv_old' FOR UPDATE"
)
