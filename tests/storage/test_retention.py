"""Responses deleted for good once older than the retention, on SQLite and PostgreSQL:
finished ones only, with their items and event logs, a batch at a time; live conversations
untouched. Deleted conversations erased for good with their items, unless a running turn
holds one. Deleted responses no response continues from erased but for what usage counts,
up their chains; one a response continues from, or stored since the search, kept.

The PostgreSQL database is shared with every other test, whose rows are created at 1.0
or later: these use earlier times, and cut off below 1.0, so a purge takes only theirs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import TextClause, event, text
from sqlalchemy.util import await_only

from stateway.core.commands import GetUsage
from stateway.core.conversations.ports import Conversation, ConversationPurger
from stateway.core.ports import (
    ConversationTurn,
    EventBatch,
    ResponseEraser,
    ResponsePurger,
    ResponseRecord,
)
from stateway.core.retention import ERASE_AFTER, RetentionSweeper
from stateway.storage.sql import SqlConversationStore, SqlResponseStore, migrate, open_store
from stateway.storage.sql.accounting import SqlUsageLedger
from stateway.storage.sql.retention import (
    SqlConversationPurger,
    SqlResponseEraser,
    SqlResponsePurger,
)
from stateway.storage.sql.usage_backfill import SqlUsageBackfill
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


async def test_a_batch_deletes_and_counts_every_tenants_and_walks_on_past_the_last(
    store: SqlResponseStore, purger: SqlResponsePurger, record: RecordFactory, tenant: str
) -> None:
    """The next batch goes on after the last key found, tenant and id of the same row
    (the first tenant's last id after the second's ids)."""
    first, second = f"{tenant}-a", f"{tenant}-b"
    for owner, name in ((first, "resp_1"), (first, "zz_2"), (second, "resp_3"), (second, "resp_4")):
        await store.save(at(record(name, tenant_id=owner), 0.5))
    assert await purger.purge(CUTOFF, 3) == 3  # resp_1, zz_2, resp_3
    assert await purger.purge(CUTOFF, 3) == 1  # resp_4
    assert await store.get(second, "resp_4") is None


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
    await skipped_while_held(database_url, _HOLD_OLD, tenant, purger)


async def skipped_while_held(
    url: str,
    hold: TextClause,
    tenant: str,
    sweep: ResponsePurger | ConversationPurger | ResponseEraser,
) -> None:
    """While another transaction on ``url`` holds a row (``hold``: another sweep's batch,
    not ended), ``sweep`` finds nothing, without waiting for it; then it takes the row."""
    other = open_store(url)
    try:
        async with other.engine.connect() as connection:
            await connection.execute(hold, {"tenant": tenant})
            assert await asyncio.wait_for(sweep.purge(CUTOFF, 100), 5) == 0
            await connection.rollback()
    finally:
        await other.aclose()
    assert await sweep.purge(CUTOFF, 100) == 1


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


async def test_an_erasing_batch_over_tenants_counts_each_and_walks_on_past_the_last(
    own_store: SqlResponseStore, erasure: SqlConversationPurger, tenant: str
) -> None:
    """A batch erases the conversations of every tenant among those it found, and counts
    them all; the next batch goes on after the last one found, its tenant included in the
    key (two tenants' conversations deleted at the same time, the first one's id after the
    second tenant's name)."""
    conversations = SqlConversationStore(own_store)
    first, second = f"{tenant}-a", f"{tenant}-b"
    for owner, name in ((first, "zz_1"), (second, "conv_2"), (first, "zz_3"), (second, "conv_4")):
        await conversations.create(Conversation(owner, name, 0.25, {}), [ITEM])
        await deleted_at(own_store, owner, name, 0.5)
    assert await erasure.purge(CUTOFF, 1) == 1  # zz_1
    assert await erasure.purge(CUTOFF, 3) == 3  # zz_3, conv_2, conv_4
    assert await rows_of(own_store, first) == await rows_of(own_store, second) == (set(), set())


@pytest.mark.parametrize(
    "own_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
async def test_conversations_another_sweep_holds_are_skipped_not_waited_for(
    own_store: SqlResponseStore, erasure: SqlConversationPurger, tenant: str, own_url: str
) -> None:
    conversations = SqlConversationStore(own_store)
    await conversations.create(Conversation(tenant, "conv_old", 0.25, {}), [ITEM])
    await deleted_at(own_store, tenant, "conv_old", 0.5)
    await skipped_while_held(own_url, _HOLD_CONVERSATION, tenant, erasure)


_HOLD_CONVERSATION = text(
    "SELECT id FROM conversations WHERE tenant_id = :tenant AND id = 'conv_old' FOR UPDATE"
)


@pytest.fixture
def eraser(own_store: SqlResponseStore) -> SqlResponseEraser:
    return SqlResponseEraser(own_store)


SECRET_BODY = {
    "id": "resp_x",
    "created_at": 0.25,
    "model": "m",
    "instructions": "secret instructions",
    "metadata": {"topic": "secret"},
    "status": "completed",
    "usage": {"input_tokens": 7, "output_tokens": 3, "total_tokens": 10},
    "completed_at": 0.3,
}


def secret(record: RecordFactory, response_id: str, previous: str | None = None) -> ResponseRecord:
    """A finished response whose body, items and event log all hold content."""
    body = {**SECRET_BODY, "id": response_id}
    row = at(record(response_id, previous, inputs=["q"], outputs=["a"], body=body), 0.25)
    row.events = EventBatch(0, [b'{"type":"response.created","sequence_number":0}'])
    return row


async def response_deleted_at(
    store: SqlResponseStore, tenant: str, response_id: str, at: float
) -> None:
    """Delete the response as a client does, then date its deletion ``at``."""
    assert await store.delete(tenant, response_id)
    async with store.engine.begin() as connection:
        await connection.execute(
            _DATE_RESPONSE_DELETION, {"tenant": tenant, "id": response_id, "at": at}
        )


async def content_of(store: SqlResponseStore, tenant: str) -> dict[str, tuple[str, str, int, int]]:
    """Each of the tenant's response rows: its status and body as stored, and how many
    items and event log rows it has."""
    async with store.engine.connect() as connection:
        rows = (await connection.execute(_CONTENT, {"tenant": tenant})).all()
    return {id_: (status, body, items, events) for id_, status, body, items, events in rows}


_DATE_RESPONSE_DELETION = text(
    "UPDATE responses SET deleted_at = :at WHERE tenant_id = :tenant AND id = :id"
)
_CONTENT = text(
    "SELECT id, status, body,"
    " (SELECT count(*) FROM items i WHERE i.tenant_id = r.tenant_id AND i.response_id = r.id),"
    " (SELECT count(*) FROM response_events e"
    "   WHERE e.tenant_id = r.tenant_id AND e.response_id = r.id)"
    " FROM responses r WHERE r.tenant_id = :tenant"
)


def erased(stored: tuple[str, str, int, int]) -> bool:
    status, body, items, events = stored
    return status == "erased" and "secret" not in body and (items, events) == (0, 0)


async def test_a_deleted_response_no_other_continues_from_loses_its_content(
    own_store: SqlResponseStore, eraser: SqlResponseEraser, record: RecordFactory, tenant: str
) -> None:
    """Its items, event log and body text go; what ``/v1/usage`` reads of it stays."""
    ledger = SqlUsageLedger(own_store.reader)
    for name in ("resp_deleted", "resp_later", "resp_live"):
        await own_store.save(secret(record, name))
    await response_deleted_at(own_store, tenant, "resp_deleted", 0.5)
    await response_deleted_at(own_store, tenant, "resp_later", 0.9)  # the next sweep's
    usage = await ledger.usage(GetUsage(tenant))
    assert usage[0].responses == 3
    assert await eraser.purge(CUTOFF, 100) == 1
    stored = await content_of(own_store, tenant)
    assert erased(stored["resp_deleted"])
    assert not erased(stored["resp_later"])
    assert not erased(stored["resp_live"])
    assert stored["resp_deleted"][1] == "{}"
    assert await ledger.usage(GetUsage(tenant)) == usage
    assert await eraser.purge(CUTOFF, 100) == 0, "an erased response is not erased again"
    assert await eraser.purge(0.95, 100) == 1
    assert erased((await content_of(own_store, tenant))["resp_later"])
    assert await ledger.usage(GetUsage(tenant)) == usage


async def test_a_deleted_response_stored_without_usage_columns_waits_for_them(
    own_store: SqlResponseStore, eraser: SqlResponseEraser, record: RecordFactory, tenant: str
) -> None:
    """A row an earlier release stored counts by its body until the backfill fills its
    columns in: erasing the body first would lose its usage."""
    ledger = SqlUsageLedger(own_store.reader)
    await own_store.save(secret(record, "resp_old"))
    await response_deleted_at(own_store, tenant, "resp_old", 0.5)
    unfill = "UPDATE responses SET model = NULL, input_tokens = NULL, output_tokens = NULL"
    async with own_store.engine.begin() as connection:
        await connection.execute(text(unfill))
    usage = await ledger.usage(GetUsage(tenant))
    assert (usage[0].model, usage[0].input_tokens) == ("m", 7)
    assert await eraser.purge(CUTOFF, 100) == 0
    assert not erased((await content_of(own_store, tenant))["resp_old"])
    assert await SqlUsageBackfill(own_store).fill(100) == 1
    assert await eraser.purge(CUTOFF, 100) == 1
    assert erased((await content_of(own_store, tenant))["resp_old"])
    assert await ledger.usage(GetUsage(tenant)) == usage


async def test_a_deleted_response_a_live_one_continues_from_keeps_its_content(
    own_store: SqlResponseStore, eraser: SqlResponseEraser, record: RecordFactory, tenant: str
) -> None:
    """Its items still serve the chain; deleting the last response of the chain then
    erases the whole chain in one sweep."""
    await own_store.save(secret(record, "resp_root"))
    await own_store.save(secret(record, "resp_parent", "resp_root"))
    await own_store.save(secret(record, "resp_child", "resp_parent"))
    await response_deleted_at(own_store, tenant, "resp_root", 0.5)
    await response_deleted_at(own_store, tenant, "resp_parent", 0.5)
    assert await eraser.purge(CUTOFF, 100) == 0
    assert not any(erased(row) for row in (await content_of(own_store, tenant)).values())
    await own_store.save(secret(record, "resp_next", "resp_child"))  # the chain goes on
    chain = await own_store.load_context(tenant, "resp_next")
    assert chain is not None
    assert [item["content"][0]["text"] for item in chain.items] == ["q", "a"] * 4

    await response_deleted_at(own_store, tenant, "resp_next", 0.6)
    await response_deleted_at(own_store, tenant, "resp_child", 0.4)
    assert await eraser.purge(CUTOFF, 100) == 4
    assert all(erased(row) for row in (await content_of(own_store, tenant)).values())


async def test_a_response_with_two_children_waits_for_both(
    own_store: SqlResponseStore, eraser: SqlResponseEraser, record: RecordFactory, tenant: str
) -> None:
    await own_store.save(secret(record, "resp_parent"))
    for name in ("resp_a", "resp_b"):
        await own_store.save(secret(record, name, "resp_parent"))
    await response_deleted_at(own_store, tenant, "resp_parent", 0.5)
    await response_deleted_at(own_store, tenant, "resp_a", 0.5)
    assert await eraser.purge(CUTOFF, 100) == 1  # resp_a: resp_b still needs the parent
    stored = await content_of(own_store, tenant)
    assert [name for name, row in sorted(stored.items()) if erased(row)] == ["resp_a"]
    chain = await own_store.load_context(tenant, "resp_b")
    assert chain is not None
    assert len(chain.items) == 4
    await response_deleted_at(own_store, tenant, "resp_b", 0.5)
    assert await eraser.purge(CUTOFF, 100) == 2
    assert all(erased(row) for row in (await content_of(own_store, tenant)).values())


async def test_a_deleted_response_still_running_is_erased_once_it_ends(
    own_store: SqlResponseStore, eraser: SqlResponseEraser, record: RecordFactory, tenant: str
) -> None:
    running = at(secret(record, "resp_running"), 0.25, "in_progress")
    running.owner = "host 1 2"
    await own_store.save(dataclasses.replace(running, output_items=[]))
    await response_deleted_at(own_store, tenant, "resp_running", 0.5)
    assert await eraser.purge(CUTOFF, 100) == 0
    assert not erased((await content_of(own_store, tenant))["resp_running"])
    assert await own_store.finish(dataclasses.replace(running, status="cancelled"))
    assert await eraser.purge(CUTOFF, 100) == 1
    assert erased((await content_of(own_store, tenant))["resp_running"])


async def test_an_erasing_batch_takes_at_most_its_limit_of_deleted_responses(
    own_store: SqlResponseStore, eraser: SqlResponseEraser, record: RecordFactory, tenant: str
) -> None:
    """Each batch searches after the last one it found, in the order of deletion: one
    deleted behind the walk waits for the next sweep."""
    for n, name in enumerate(("resp_b", "resp_c", "resp_d", "resp_a")):
        await own_store.save(secret(record, name))
        if name != "resp_a":
            await response_deleted_at(own_store, tenant, name, 0.5 + n / 100)
    assert await eraser.purge(CUTOFF, 2) == 2  # resp_b, resp_c
    await response_deleted_at(own_store, tenant, "resp_a", 0.4)  # behind the walk
    assert await eraser.purge(CUTOFF, 2) == 1  # resp_d: the walk's end
    assert not erased((await content_of(own_store, tenant))["resp_a"])
    assert await eraser.purge(CUTOFF, 2) == 1  # the next sweep
    assert await eraser.purge(CUTOFF, 2) == 0


async def test_an_erasing_batch_of_responses_over_tenants_counts_each_and_walks_on(
    own_store: SqlResponseStore, eraser: SqlResponseEraser, record: RecordFactory, tenant: str
) -> None:
    """As for conversations: every tenant's among those a batch found are erased and
    counted, and the next batch goes on after the last one found, its tenant included in
    the key (deleted at the same time, the first one's id after the second tenant)."""
    first, second = f"{tenant}-a", f"{tenant}-b"
    for owner, name in ((first, "zz_1"), (second, "resp_2"), (first, "zz_3"), (second, "resp_4")):
        row = dataclasses.replace(secret(record, name), tenant_id=owner)
        await own_store.save(row)
        await response_deleted_at(own_store, owner, name, 0.5)
    assert await eraser.purge(CUTOFF, 1) == 1  # zz_1
    assert await eraser.purge(CUTOFF, 3) == 3  # zz_3, resp_2, resp_4
    for owner in (first, second):
        assert all(erased(row) for row in (await content_of(own_store, owner)).values())


async def test_an_erasing_batch_goes_up_every_tenants_chains(
    own_store: SqlResponseStore, eraser: SqlResponseEraser, record: RecordFactory, tenant: str
) -> None:
    """The responses a batch's erasures continued from are searched for each tenant
    among them, and erased in the same batch."""
    for owner in (f"{tenant}-a", f"{tenant}-b"):
        for name, previous in (("resp_parent", None), ("resp_child", "resp_parent")):
            row = dataclasses.replace(secret(record, name, previous), tenant_id=owner)
            await own_store.save(row)
        for name in ("resp_child", "resp_parent"):
            await response_deleted_at(own_store, owner, name, 0.5)
    assert await eraser.purge(CUTOFF, 10) == 4
    for owner in (f"{tenant}-a", f"{tenant}-b"):
        assert all(erased(row) for row in (await content_of(own_store, owner)).values())


async def test_a_response_continued_from_while_being_erased_is_kept(
    own_store: SqlResponseStore,
    eraser: SqlResponseEraser,
    record: RecordFactory,
    tenant: str,
    own_url: str,
) -> None:
    """A child stored between the sweep's search and its erasure (another process's run
    that read the response before it was deleted): the erasure checks again, in its own
    statement, and leaves the response the child needs, and goes on to another tenant's
    the batch found."""
    await own_store.save(secret(record, "resp_parent"))
    await response_deleted_at(own_store, tenant, "resp_parent", 0.5)
    later = f"{tenant}-b"
    await own_store.save(dataclasses.replace(secret(record, "resp_other"), tenant_id=later))
    await response_deleted_at(own_store, later, "resp_other", 0.5)
    other = open_store(own_url)

    async def continue_there() -> None:
        await other.save(secret(record, "resp_child", "resp_parent"))

    searched = False

    def meanwhile(_connection: Any, _cursor: Any, statement: str, *_: Any) -> None:
        nonlocal searched
        search = statement.lstrip().upper().startswith("SELECT") and "deleted_at" in statement
        if search and not searched:
            searched = True
            await_only(continue_there())

    event.listen(own_store.engine.sync_engine, "after_cursor_execute", meanwhile)
    try:
        assert await eraser.purge(CUTOFF, 100) == 1
    finally:
        event.remove(own_store.engine.sync_engine, "after_cursor_execute", meanwhile)
        await other.aclose()
    assert searched
    assert not erased((await content_of(own_store, tenant))["resp_parent"])
    assert erased((await content_of(own_store, later))["resp_other"])
    chain = await own_store.load_context(tenant, "resp_child")
    assert chain is not None
    assert len(chain.items) == 4


@pytest.mark.parametrize(
    "own_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
async def test_deleted_responses_another_sweep_holds_are_skipped_not_waited_for(
    own_store: SqlResponseStore,
    eraser: SqlResponseEraser,
    record: RecordFactory,
    tenant: str,
    own_url: str,
) -> None:
    await own_store.save(secret(record, "resp_old"))
    await response_deleted_at(own_store, tenant, "resp_old", 0.5)
    await skipped_while_held(own_url, _HOLD_OLD, tenant, eraser)


class _Filling:
    """A backfill as :func:`skipped_while_held` drives a sweep."""

    def __init__(self, backfill: SqlUsageBackfill) -> None:
        self.backfill = backfill

    async def purge(self, before: float, limit: int) -> int:
        return await self.backfill.fill(limit)


@pytest.mark.parametrize(
    "own_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
async def test_rows_another_backfill_holds_are_skipped_not_waited_for(
    own_store: SqlResponseStore, record: RecordFactory, tenant: str, own_url: str
) -> None:
    """Processes filling in the usage columns side by side share the work, as the
    sweeps do."""
    await own_store.save(at(record("resp_old"), 0.5))
    async with own_store.engine.begin() as connection:
        await connection.execute(_UNFILL_OLD, {"tenant": tenant})
    await skipped_while_held(own_url, _HOLD_OLD, tenant, _Filling(SqlUsageBackfill(own_store)))


_UNFILL_OLD = text(
    "UPDATE responses SET model = NULL WHERE tenant_id = :tenant AND id = 'resp_old'"
)


async def test_a_response_stored_after_the_one_it_continues_from_was_erased_says_so(
    own_store: SqlResponseStore,
    eraser: SqlResponseEraser,
    record: RecordFactory,
    tenant: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A run longer than the grace that read its previous response before it was deleted
    stores its row after the erasure: its chain starts at itself, and reading it logs a
    warning rather than cut the context silently."""
    await own_store.save(secret(record, "resp_parent"))
    await response_deleted_at(own_store, tenant, "resp_parent", 0.5)
    assert await eraser.purge(CUTOFF, 100) == 1
    await own_store.save(secret(record, "resp_late", "resp_parent"))
    with caplog.at_level(logging.WARNING, logger="stateway.storage.sql.store"):
        chain = await own_store.load_context(tenant, "resp_late")
    assert chain is not None
    assert [item["content"][0]["text"] for item in chain.items] == ["q", "a"]
    [warning] = [r for r in caplog.records if r.name == "stateway.storage.sql.store"]
    assert "resp_late" in warning.getMessage()
    assert "erased" in warning.getMessage()


async def test_an_event_log_kept_after_its_response_was_erased_is_not_stored(
    own_store: SqlResponseStore, eraser: SqlResponseEraser, record: RecordFactory, tenant: str
) -> None:
    """A WebSocket run's deferred log kept after its end (the connection closing with
    frames unsent) is written late: its response deleted and erased meanwhile, the log's
    content would stay for ever, the erased row out of every later sweep's reach."""
    await own_store.save(secret(record, "resp_gone"))
    await response_deleted_at(own_store, tenant, "resp_gone", 0.5)
    assert await eraser.purge(CUTOFF, 100) == 1
    late = EventBatch(0, [b'{"type":"response.output_text.delta","delta":"secret"}'])
    await own_store.append_events(tenant, "resp_gone", late)
    assert erased((await content_of(own_store, tenant))["resp_gone"])


async def test_a_sweep_erases_the_responses_deleted_an_hour_before_it(
    own_store: SqlResponseStore, eraser: SqlResponseEraser, record: RecordFactory, tenant: str
) -> None:
    """What the sweeper asks of the store: one deleted less than an hour ago waits."""
    for name in ("resp_old", "resp_recent"):
        await own_store.save(secret(record, name))
    await response_deleted_at(own_store, tenant, "resp_old", 1_000.0)
    await response_deleted_at(own_store, tenant, "resp_recent", 1_000.0 + 60)
    sweeper = RetentionSweeper(None, None, eraser=eraser, clock=lambda: 1_001.0 + ERASE_AFTER)
    assert await sweeper.erase_responses() == 1
    stored = await content_of(own_store, tenant)
    assert erased(stored["resp_old"])
    assert not erased(stored["resp_recent"])


async def test_an_erasing_batch_stops_up_a_chain_at_its_limit_and_the_next_goes_on(
    own_store: SqlResponseStore, eraser: SqlResponseEraser, record: RecordFactory, tenant: str
) -> None:
    """A transaction erases a bounded number (SQLite's one writer waits behind it), and
    the sweep still erases the whole deleted chain, though its walk has gone past it."""
    previous = None
    for n in range(5):
        await own_store.save(secret(record, f"resp_{n}", previous))
        await response_deleted_at(own_store, tenant, f"resp_{n}", 0.5)
        previous = f"resp_{n}"
    for n, name in enumerate(("resp_x", "resp_y", "resp_z")):
        await own_store.save(secret(record, name))
        await response_deleted_at(own_store, tenant, name, 0.6 + n / 20)
    # Each batch first takes the chain where the last one stopped, then fills its room
    # from the walk: the rest of a round up the chain is done whole.
    batches = [{"4", "x"}, {"3", "y"}, {"2", "z"}, {"1", "0"}]
    done: set[str] = set()
    for batch in batches:
        assert await eraser.purge(CUTOFF, 2) == 2
        done |= {f"resp_{name}" for name in batch}
        stored = await content_of(own_store, tenant)
        assert {name for name, row in stored.items() if erased(row)} == done
    assert await eraser.purge(CUTOFF, 2) == 0  # the sweep's end
