"""A conversation turn's writes, on SQLite and PostgreSQL: the lock taken with the
in-progress row, the items appended and the lock let go with the end, stale holders,
refusals that write nothing, and claims racing from two processes' worth of stores."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

import pytest
from sqlalchemy import text

from stateway.core.conversations.ports import Conversation
from stateway.core.errors import ConversationLocked, ConversationNotFound
from stateway.core.items import Item
from stateway.core.ports import ConversationTurn, ResponseRecord
from stateway.storage.sql import SqlConversationStore, SqlResponseStore, open_store
from tests.storage.test_queries import statements

RecordFactory = Callable[..., ResponseRecord]


def message(text: str, item_id: str) -> Item:
    return {
        "type": "message",
        "role": "user",
        "content": [{"type": "text", "text": text}],
        "id": item_id,
    }


def texts(items: list[Item]) -> list[str]:
    return [item["content"][0]["text"] for item in items]


@pytest.fixture
async def conversation(conversations: SqlConversationStore, tenant: str) -> str:
    await conversations.create(Conversation(tenant, "conv_1", 1.0, {}), [message("hello", "msg_0")])
    return "conv_1"


def start(
    record: RecordFactory, response_id: str, seen: int = 1, text: str = "q"
) -> ResponseRecord:
    """The in-progress row of a turn of conv_1 that read ``seen`` items."""
    return replace(
        record(response_id, inputs=[message(text, f"in_{response_id}")]),
        status="in_progress",
        turn=ConversationTurn("conv_1", seen=seen),
    )


def end(started: ResponseRecord, status: str = "completed", answer: str = "a") -> ResponseRecord:
    """The end of ``started``: its output, and its items for the conversation."""
    output = [message(answer, f"out_{started.id}")]
    appended = started.input_items + output if status in ("completed", "incomplete") else []
    return replace(
        started,
        status=status,
        input_items=[],
        output_items=output,
        turn=ConversationTurn("conv_1", items=appended),
    )


async def loaded(conversations: SqlConversationStore, tenant: str) -> list[str]:
    items = await conversations.load_items(tenant, "conv_1")
    assert items is not None
    return texts(items.items)


async def test_a_turn_holds_the_conversation_until_it_ends(
    store: SqlResponseStore,
    conversations: SqlConversationStore,
    record: RecordFactory,
    tenant: str,
    conversation: str,
) -> None:
    first = start(record, "r1", text="question")
    await store.save(first)
    with pytest.raises(ConversationLocked):
        await store.save(start(record, "r2"))
    assert await store.get(tenant, "r2") is None, "a refused turn writes nothing"
    with pytest.raises(ConversationLocked):
        await conversations.add_items(tenant, conversation, [message("x", "msg_x")])

    await store.finish(end(first, answer="answer"))
    assert await loaded(conversations, tenant) == ["hello", "question", "answer"]
    stored = await store.get(tenant, "r1")
    assert stored is not None
    assert stored.status == "completed"
    page = await conversations.list_items(tenant, conversation, after=None, limit=5, order="asc")
    assert page is not None
    assert [item["id"] for item in page.items] == ["msg_0", "in_r1", "out_r1"], "ids kept"

    second = start(record, "r2", seen=3)
    await store.save(second)  # the conversation was let go
    await store.finish(end(second))
    assert (await loaded(conversations, tenant))[3:] == ["q", "a"]


@pytest.mark.parametrize("status", ["failed", "cancelled"])
async def test_a_turn_that_fails_or_is_cancelled_appends_nothing_and_lets_go(
    store: SqlResponseStore,
    conversations: SqlConversationStore,
    record: RecordFactory,
    tenant: str,
    conversation: str,
    status: str,
) -> None:
    first = start(record, "r1")
    await store.save(first)
    await store.finish(end(first, status))
    assert await loaded(conversations, tenant) == ["hello"]
    await store.save(start(record, "r2"))


async def test_a_stale_lock_is_taken_and_a_live_one_is_not(
    store: SqlResponseStore,
    conversations: SqlConversationStore,
    record: RecordFactory,
    tenant: str,
    conversation: str,
) -> None:
    crashed = start(record, "r1")
    await store.save(crashed)
    with pytest.raises(ConversationLocked):
        await store.save(start(record, "r2"))
    # A dead process's run failed without letting go (an earlier release's start-up).
    await store.finish(replace(crashed, status="failed", input_items=[], turn=None))
    await store.save(start(record, "r2"))
    assert await loaded(conversations, tenant) == ["hello"]


async def test_a_queued_turn_holds_the_conversation(
    store: SqlResponseStore,
    conversations: SqlConversationStore,
    record: RecordFactory,
    tenant: str,
    conversation: str,
) -> None:
    """A background turn waiting for a worker holds it as a running one does: its holder
    has not ended."""
    await store.save(replace(start(record, "r1"), status="queued"))
    with pytest.raises(ConversationLocked):
        await store.save(start(record, "r2"))
    with pytest.raises(ConversationLocked):
        await conversations.add_items(tenant, conversation, [message("x", "msg_x")])


async def test_a_late_end_of_a_turn_another_process_failed_appends_nothing(
    store: SqlResponseStore,
    conversations: SqlConversationStore,
    record: RecordFactory,
    tenant: str,
    conversation: str,
) -> None:
    """Its process paused past its lease, the turn was failed elsewhere (no turn: the
    conversation is free as its holder ended); its run's end, arriving late, must not add
    a failed response's items to the conversation."""
    paused = start(record, "r1", text="question")
    await store.save(paused)
    assert await store.finish(replace(paused, status="failed", input_items=[], turn=None))
    assert not await store.finish(end(paused, answer="late answer"))
    assert await loaded(conversations, tenant) == ["hello"]
    await store.save(start(record, "r2"))  # still free


async def test_a_turn_whose_context_is_out_of_date_is_refused(
    store: SqlResponseStore,
    conversations: SqlConversationStore,
    record: RecordFactory,
    tenant: str,
    conversation: str,
) -> None:
    await conversations.add_items(tenant, conversation, [message("later", "msg_1")])
    with pytest.raises(ConversationLocked):
        await store.save(start(record, "r1", seen=1))
    assert await store.get(tenant, "r1") is None
    await store.save(start(record, "r1", seen=2))


async def test_a_turn_on_an_unknown_or_deleted_conversation_is_not_found(
    store: SqlResponseStore,
    conversations: SqlConversationStore,
    record: RecordFactory,
    tenant: str,
    conversation: str,
) -> None:
    unknown = replace(start(record, "r1"), turn=ConversationTurn("conv_nope", seen=0))
    with pytest.raises(ConversationNotFound) as caught:
        await store.save(unknown)
    assert caught.value.param == "conversation"
    await conversations.delete(tenant, conversation)
    with pytest.raises(ConversationNotFound):
        await store.save(start(record, "r2"))
    assert await store.get(tenant, "r1") is None
    assert await store.get(tenant, "r2") is None


async def test_a_conversation_deleted_during_a_turn_gets_nothing(
    store: SqlResponseStore,
    conversations: SqlConversationStore,
    record: RecordFactory,
    tenant: str,
    conversation: str,
) -> None:
    first = start(record, "r1")
    await store.save(first)
    await conversations.delete(tenant, conversation)
    await store.finish(end(first))
    stored = await store.get(tenant, "r1")
    assert stored is not None
    assert stored.status == "completed"
    # the turn's items, by its id: a gateway sweeping the database the suite shares may
    # have erased the deleted conversation's own item meanwhile
    turns_items = "SELECT count(*) FROM conversation_items WHERE tenant_id = :tenant"
    async with store.engine.connect() as connection:
        rows = await connection.execute(
            text(turns_items + " AND response_id = 'r1'"), {"tenant": tenant}
        )
        assert rows.scalar() == 0, "nothing appended to the deleted conversation"


async def test_a_turns_items_get_new_ids_where_the_conversation_has_theirs(
    store: SqlResponseStore,
    conversations: SqlConversationStore,
    record: RecordFactory,
    tenant: str,
    conversation: str,
) -> None:
    first = replace(start(record, "r1"), input_items=[message("again", "msg_0")])
    await store.save(first)
    await store.finish(end(first))
    page = await conversations.list_items(tenant, conversation, after=None, limit=5, order="asc")
    assert page is not None
    ids = [item["id"] for item in page.items]
    assert ids[0] == "msg_0"
    assert ids[1] != "msg_0"
    assert ids[1].startswith("msg_")
    assert ids[2] == "out_r1"
    stored_input = await store.list_input_items(tenant, "r1", after=None, limit=5, order="asc")
    assert stored_input is not None
    assert stored_input.items[0]["id"] == "msg_0", "the response keeps its own copy"


async def test_a_turns_reference_whose_id_is_taken_answers_its_call_by_call_id(
    store: SqlResponseStore,
    conversations: SqlConversationStore,
    record: RecordFactory,
    tenant: str,
    conversation: str,
) -> None:
    """The conversation already holds ``msg_0``: a turn's ``local_shell_call_output``
    naming its call so gets a new id, and keeps the reference as its ``call_id``."""
    output = {"type": "local_shell_call_output", "id": "msg_0", "output": "ok"}
    first = replace(start(record, "r1"), input_items=[output])
    await store.save(first)
    await store.finish(end(first))
    page = await conversations.list_items(tenant, conversation, after=None, limit=5, order="asc")
    assert page is not None
    stored = page.items[1]
    assert stored["id"] not in ("msg_0", "out_r1")
    assert stored == {**output, "id": stored["id"], "call_id": "msg_0"}
    assert len({item["id"] for item in page.items}) == 3


async def test_a_refused_claim_leaves_its_batch_alone(
    store: SqlResponseStore,
    conversations: SqlConversationStore,
    record: RecordFactory,
    tenant: str,
    conversation: str,
) -> None:
    await store.save(start(record, "r0"))
    batch = [record("plain-1", inputs=["x"]), start(record, "r1"), record("plain-2")]
    results = await asyncio.gather(*(store.save(r) for r in batch), return_exceptions=True)
    assert results[0] is None
    assert results[2] is None
    assert isinstance(results[1], ConversationLocked)
    assert await store.get(tenant, "plain-1") is not None
    assert await store.get(tenant, "plain-2") is not None
    assert await store.get(tenant, "r1") is None


@pytest.fixture
async def second_store(
    database_url: str, store: SqlResponseStore
) -> AsyncIterator[SqlResponseStore]:
    """Another store on the same database: its own engine and writer, as another process
    would have (``store`` migrated the database)."""
    other = open_store(database_url)
    yield other
    await other.aclose()


async def test_racing_claims_from_two_writers_let_exactly_one_in(
    store: SqlResponseStore,
    second_store: SqlResponseStore,
    conversations: SqlConversationStore,
    record: RecordFactory,
    tenant: str,
) -> None:
    for round_ in range(8):
        conversation_id = f"conv_race_{round_}"
        await conversations.create(Conversation(tenant, conversation_id, 1.0, {}), [])
        turns = [
            replace(start(record, f"r{round_}-{n}"), turn=ConversationTurn(conversation_id, seen=0))
            for n in range(2)
        ]
        results = await asyncio.gather(
            store.save(turns[0]), second_store.save(turns[1]), return_exceptions=True
        )
        assert sorted(type(r).__name__ for r in results) == ["ConversationLocked", "NoneType"]


async def test_the_items_come_with_the_candidate_of_the_last_turn_that_appended_some(
    store: SqlResponseStore,
    conversations: SqlConversationStore,
    record: RecordFactory,
    tenant: str,
    conversation: str,
) -> None:
    """A turn's cache affinity hint, and its response (the latest a Messages thread may
    continue from), read in the one statement that loads its context."""

    async def served_by() -> tuple[str | None, str | None]:
        with statements(store.engine) as executed:
            items = await conversations.load_items(tenant, conversation)
        assert len(executed) == 1
        assert items is not None
        return items.served_by, items.last_response_id

    assert await served_by() == (None, None)  # no turn yet
    first = start(record, "r1")
    await store.save(first)
    await store.finish(replace(end(first), served_by="a/a-model"))
    assert await served_by() == ("a/a-model", "r1")

    failed = start(record, "r2", seen=3)  # appends nothing: the cache holds r1's prefix
    await store.save(failed)
    await store.finish(replace(end(failed, "failed"), served_by="b/b-model"))
    await conversations.add_items(tenant, conversation, [message("outside", "msg_x")])
    assert await served_by() == ("a/a-model", "r1")

    second = start(record, "r3", seen=4)
    await store.save(second)
    await store.finish(replace(end(second), served_by="b/b-model"))
    assert await served_by() == ("b/b-model", "r3")


async def test_the_last_turn_is_the_conversations_own(
    store: SqlResponseStore,
    conversations: SqlConversationStore,
    record: RecordFactory,
    tenant: str,
    conversation: str,
) -> None:
    """Not the tenant's latest in another conversation, whose items lie at later positions."""
    first = start(record, "r1")
    await store.save(first)
    await store.finish(replace(end(first), served_by="a/a-model"))
    items = [message(str(n), f"msg_{n}") for n in range(4)]
    await conversations.create(Conversation(tenant, "conv_2", 1.0, {}), items)
    elsewhere = replace(start(record, "r2"), turn=ConversationTurn("conv_2", seen=4))
    await store.save(elsewhere)
    appended = ConversationTurn("conv_2", items=[message("a", "out_r2")])
    await store.finish(replace(end(elsewhere), served_by="b/b-model", turn=appended))

    loaded = await conversations.load_items(tenant, conversation)
    assert loaded is not None
    assert (loaded.served_by, loaded.last_response_id) == ("a/a-model", "r1")


async def test_a_turns_item_whose_id_is_too_long_for_the_index_gets_a_new_one(
    store: SqlResponseStore,
    conversations: SqlConversationStore,
    record: RecordFactory,
    tenant: str,
    conversation: str,
) -> None:
    """A client's input item id too long for PostgreSQL's index (2704 bytes a row) does not
    fail the turn's end, which would leave the response failed and its items out."""
    too_long = "msg_" + secrets.token_hex(2048)  # random: no compression
    first = replace(start(record, "r1"), input_items=[message("long", too_long)])
    await store.save(first)
    assert await store.finish(end(first))
    page = await conversations.list_items(tenant, conversation, after=None, limit=5, order="asc")
    assert page is not None
    assert texts(page.items) == ["hello", "long", "a"]
    assert page.items[1]["id"] != too_long
    assert page.items[1]["id"].startswith("msg_")
    stored_input = await store.list_input_items(tenant, "r1", after=None, limit=5, order="asc")
    assert stored_input is not None
    assert stored_input.items[0]["id"] == too_long, "the response keeps its own copy"
