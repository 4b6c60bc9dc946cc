"""SqlConversationStore against its port, on SQLite and PostgreSQL: conversations, their
items, pages, and ids unique within a conversation."""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from stateway.core.conversations.ports import Conversation
from stateway.core.items import Item
from stateway.storage.sql import SqlConversationStore, SqlResponseStore
from stateway.storage.sql.schema import MAX_ITEM_ID_BYTES
from tests.storage.test_queries import statements


def message(text: str, item_id: str | None = None) -> Item:
    item: Item = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": text}],
    }
    if item_id is not None:
        item["id"] = item_id
    return item


def texts(items: list[Item]) -> list[str]:
    return [item["content"][0]["text"] for item in items]


async def new(
    conversations: SqlConversationStore,
    tenant: str,
    items: list[Item] = [],  # noqa: B006 - never mutated
    **metadata: str,
) -> Conversation:
    conversation = Conversation(tenant, "conv_1", 1_700_000_000.5, dict(metadata))
    await conversations.create(conversation, items)
    return conversation


async def test_create_get_update_delete(conversations: SqlConversationStore, tenant: str) -> None:
    created = await new(conversations, tenant, topic="tea")
    assert await conversations.get(tenant, "conv_1") == created

    updated = await conversations.update(tenant, "conv_1", {"topic": "coffee", "b": "2"})
    assert updated == Conversation(tenant, "conv_1", 1_700_000_000.5, {"topic": "coffee", "b": "2"})
    assert await conversations.get(tenant, "conv_1") == updated

    assert await conversations.delete(tenant, "conv_1") is True
    assert await conversations.delete(tenant, "conv_1") is False
    assert await conversations.get(tenant, "conv_1") is None
    assert await conversations.update(tenant, "conv_1", {}) is None


async def test_a_deleted_conversation_is_unknown_everywhere(
    conversations: SqlConversationStore, tenant: str
) -> None:
    await new(conversations, tenant, [message("a", "msg_a")])
    await conversations.delete(tenant, "conv_1")
    assert await conversations.load_items(tenant, "conv_1") is None
    assert await conversations.add_items(tenant, "conv_1", [message("b")]) is None
    page = await conversations.list_items(tenant, "conv_1", after=None, limit=5, order="asc")
    assert page is None
    assert await conversations.get_item(tenant, "conv_1", "msg_a") is None
    assert await conversations.delete_item(tenant, "conv_1", "msg_a") is False


async def test_unknown_ids_and_nul_bytes_match_nothing(
    conversations: SqlConversationStore, tenant: str
) -> None:
    await new(conversations, tenant, [message("a", "msg_a")])
    for conversation_id in ("conv_nope", "conv\x00"):
        assert await conversations.get(tenant, conversation_id) is None
        assert await conversations.update(tenant, conversation_id, {}) is None
        assert await conversations.delete(tenant, conversation_id) is False
        assert await conversations.load_items(tenant, conversation_id) is None
        assert await conversations.add_items(tenant, conversation_id, [message("x")]) is None
        assert await conversations.get_item(tenant, conversation_id, "msg_a") is None
        assert await conversations.delete_item(tenant, conversation_id, "msg_a") is False
    assert await conversations.get_item(tenant, "conv_1", "msg\x00") is None
    page = await conversations.list_items(tenant, "conv_1", after="m\x00", limit=5, order="asc")
    assert page is not None
    assert page.items == []


async def test_tenants_are_isolated(conversations: SqlConversationStore, tenant: str) -> None:
    await new(conversations, tenant, [message("mine", "msg_a")])
    other = f"{tenant}-other"
    assert await conversations.get(other, "conv_1") is None
    assert await conversations.load_items(other, "conv_1") is None
    assert await conversations.get_item(other, "conv_1", "msg_a") is None
    assert await conversations.delete(other, "conv_1") is False
    assert await conversations.get(tenant, "conv_1") is not None


async def test_items_append_in_order_and_load_with_the_length(
    conversations: SqlConversationStore, tenant: str
) -> None:
    await new(conversations, tenant, [message("one", "msg_1")])
    added = await conversations.add_items(
        tenant, "conv_1", [message("two", "msg_2"), message("three", "msg_3")]
    )
    assert added is not None
    assert texts(added) == ["two", "three"]
    loaded = await conversations.load_items(tenant, "conv_1")
    assert loaded is not None
    assert texts(loaded.items) == ["one", "two", "three"]
    assert loaded.next_position == 3

    assert await conversations.delete_item(tenant, "conv_1", "msg_2") is True
    assert await conversations.delete_item(tenant, "conv_1", "msg_2") is False
    loaded = await conversations.load_items(tenant, "conv_1")
    assert loaded is not None
    assert texts(loaded.items) == ["one", "three"]
    assert loaded.next_position == 3, "a deleted item's place is not reused"


async def test_an_empty_conversation_loads_empty(
    conversations: SqlConversationStore, tenant: str
) -> None:
    await new(conversations, tenant)
    loaded = await conversations.load_items(tenant, "conv_1")
    assert loaded is not None
    assert (loaded.items, loaded.next_position) == ([], 0)


async def test_ids_are_unique_within_a_conversation(
    conversations: SqlConversationStore, tenant: str
) -> None:
    await new(conversations, tenant, [message("one", "msg_1")])
    added = await conversations.add_items(
        tenant,
        "conv_1",
        [message("clash", "msg_1"), message("new", "msg_2"), message("twice", "msg_2")],
    )
    assert added is not None
    ids = [item["id"] for item in added]
    assert ids[1] == "msg_2", "a free id is kept"
    assert ids[0] not in ("msg_1", "msg_2")
    assert ids[0].startswith("msg_")
    assert ids[2] not in ("msg_1", "msg_2")
    assert ids[2].startswith("msg_")
    # renamed, an item is otherwise as given: a message gains no ``call_id``
    assert added[0] == {**message("clash"), "id": ids[0]}
    assert added[2] == {**message("twice"), "id": ids[2]}
    assert await conversations.get_item(tenant, "conv_1", ids[0]) == added[0]
    first = await conversations.get_item(tenant, "conv_1", "msg_1")
    assert first is not None
    assert texts([first]) == ["one"]


async def test_items_without_an_id_get_one_of_their_type(
    conversations: SqlConversationStore, tenant: str
) -> None:
    call = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}
    unknown: dict[str, Any] = {"type": "some_future_item"}
    await new(conversations, tenant)
    added = await conversations.add_items(tenant, "conv_1", [call, unknown])
    assert added is not None
    assert added[0]["id"].startswith("fc_")
    assert added[1]["id"].startswith("item_")


async def test_a_reference_id_is_kept_unless_taken_and_then_named_as_the_call_id(
    conversations: SqlConversationStore, tenant: str
) -> None:
    """A ``local_shell_call_output``'s ``id`` names its call: kept while the conversation
    has no item with it; else the output gets a new id, and answers its call by
    ``call_id``, so no two items of a conversation share an id."""
    output = {"type": "local_shell_call_output", "id": "call_1", "output": "ok"}
    await new(conversations, tenant, [output, message("doomed", "call_2")])
    assert await conversations.delete_item(tenant, "conv_1", "call_2") is True
    added = await conversations.add_items(
        tenant,
        "conv_1",
        [
            dict(output),
            {**output, "id": "call_2"},
            {**output, "id": "call_3"},
            {**output, "id": "call_3"},
        ],
    )
    assert added is not None
    assert added[2]["id"] == "call_3", "a free reference is kept"
    for renamed, reference in [(added[0], "call_1"), (added[1], "call_2"), (added[3], "call_3")]:
        assert renamed["id"].startswith("item_")
        assert {**renamed, "id": reference, "call_id": None} == {
            **output,
            "id": reference,
            "call_id": None,
        }
        assert renamed["call_id"] == reference, "it still answers its call"
    page = await conversations.list_items(tenant, "conv_1", after=None, limit=20, order="asc")
    assert page is not None
    ids = [item["id"] for item in page.items]
    assert len(ids) == len(set(ids)) == 5


async def test_a_renamed_output_that_names_its_call_by_call_id_keeps_it(
    conversations: SqlConversationStore, tenant: str
) -> None:
    """An output the gateway renamed before (listed, then added again) names its call by
    ``call_id``: renamed again, it still answers that call, not its former id."""
    output = {
        "type": "local_shell_call_output",
        "id": "item_1",
        "call_id": "call_1",
        "output": "ok",
    }
    await new(conversations, tenant)
    added = await conversations.add_items(tenant, "conv_1", [dict(output), dict(output)])
    assert added is not None
    assert added[0] == output
    assert added[1]["id"] not in ("item_1", "call_1")
    assert added[1] == {**output, "id": added[1]["id"]}


async def test_no_two_rows_of_a_conversation_hold_one_id(
    conversations: SqlConversationStore, store: SqlResponseStore, tenant: str
) -> None:
    """What keeps a cursor naming one position whatever wrote the rows: a unique index."""
    await new(conversations, tenant, [message("one", "msg_1")])
    duplicate = text(
        "INSERT INTO conversation_items (tenant_id, conversation_id, position, item_id,"
        " created_at, body) VALUES (:tenant, 'conv_1', 7, 'msg_1', 1.0, '{}')"
    )
    with pytest.raises(IntegrityError):
        async with store.engine.begin() as connection:
            await connection.execute(duplicate, {"tenant": tenant})


@pytest.mark.parametrize("order", ["asc", "desc"])
async def test_pages_follow_the_cursor(
    conversations: SqlConversationStore, tenant: str, order: Any
) -> None:
    await new(conversations, tenant, [message(str(n), f"msg_{n}") for n in range(5)])
    await conversations.delete_item(tenant, "conv_1", "msg_2")
    expected = ["0", "1", "3", "4"] if order == "asc" else ["4", "3", "1", "0"]
    seen: list[str] = []
    after = None
    while True:
        page = await conversations.list_items(tenant, "conv_1", after=after, limit=2, order=order)
        assert page is not None
        seen += texts(page.items)
        if not page.has_more:
            break
        after = page.items[-1]["id"]
    assert seen == expected
    unknown = await conversations.list_items(tenant, "conv_1", after="msg_9", limit=2, order=order)
    assert unknown is not None
    assert (unknown.items, unknown.has_more) == ([], False), "an unknown cursor is an empty page"


async def test_a_cursor_is_looked_up_in_its_own_conversation(
    conversations: SqlConversationStore, tenant: str
) -> None:
    """Ids are unique within a conversation only: the same ids elsewhere, at other
    positions, move no cursor."""
    await new(conversations, tenant, [message(str(n), f"msg_{n}") for n in range(3)])
    other = [message("b", "msg_2"), message("c", "msg_0"), message("d", "msg_9")]
    await conversations.create(Conversation(tenant, "conv_2", 1.0, {}), other)

    async def page(after: str, order: Any) -> tuple[list[str], bool]:
        found = await conversations.list_items(tenant, "conv_1", after=after, limit=5, order=order)
        assert found is not None
        return texts(found.items), found.has_more

    assert await page("msg_2", "asc") == ([], False)
    assert await page("msg_0", "desc") == ([], False)
    assert await page("msg_9", "asc") == ([], False), "an unknown cursor here"
    assert await page("msg_0", "asc") == (["1", "2"], False)


@pytest.mark.parametrize("order", ["asc", "desc"])
async def test_a_cursor_naming_a_deleted_item_goes_on_after_it(
    conversations: SqlConversationStore, tenant: str, order: Any
) -> None:
    """What the SDK's auto-pager does to a client deleting each item it is handed: the
    next page's cursor is the last item of the page before, deleted by then."""
    await new(conversations, tenant, [message(str(n), f"msg_{n}") for n in range(5)])
    seen: list[str] = []
    after = None
    while True:
        page = await conversations.list_items(tenant, "conv_1", after=after, limit=2, order=order)
        assert page is not None
        for item in page.items:
            assert await conversations.delete_item(tenant, "conv_1", item["id"]) is True
        seen += texts(page.items)
        if not page.has_more:
            break
        after = page.items[-1]["id"]
    assert seen == (["0", "1", "2", "3", "4"] if order == "asc" else ["4", "3", "2", "1", "0"])
    empty = await conversations.list_items(tenant, "conv_1", after=None, limit=2, order=order)
    assert empty is not None
    assert (empty.items, empty.has_more) == ([], False)


async def test_a_deleted_item_is_gone_but_its_id_is_not_given_again(
    conversations: SqlConversationStore, store: SqlResponseStore, tenant: str
) -> None:
    await new(conversations, tenant, [message("secret", "msg_1"), message("kept", "msg_2")])
    assert await conversations.delete_item(tenant, "conv_1", "msg_1") is True
    assert await conversations.delete_item(tenant, "conv_1", "msg_1") is False
    assert await conversations.get_item(tenant, "conv_1", "msg_1") is None
    loaded = await conversations.load_items(tenant, "conv_1")
    assert loaded is not None
    assert texts(loaded.items) == ["kept"]
    rows_of_tenant = text("SELECT body FROM conversation_items WHERE tenant_id = :tenant")
    async with store.engine.connect() as connection:
        rows = (await connection.execute(rows_of_tenant, {"tenant": tenant})).all()
    assert len(rows) == 2, "the deleted item's row stays, as a tombstone"
    assert all("secret" not in body for (body,) in rows), "a deleted item's content is erased"

    added = await conversations.add_items(tenant, "conv_1", [message("again", "msg_1")])
    assert added is not None
    assert added[0]["id"] != "msg_1", "an id names one item for the conversation's life"


async def test_limit_must_be_positive(conversations: SqlConversationStore, tenant: str) -> None:
    with pytest.raises(ValueError, match="positive"):
        await conversations.list_items(tenant, "conv_1", after=None, limit=0, order="asc")


async def test_loading_a_turns_context_takes_one_statement(
    conversations: SqlConversationStore, store: SqlResponseStore, tenant: str
) -> None:
    await new(conversations, tenant, [message(str(n)) for n in range(20)])
    with statements(store.engine) as executed:
        loaded = await conversations.load_items(tenant, "conv_1")
    assert loaded is not None
    assert len(loaded.items) == 20
    assert len(executed) == 1


async def test_an_id_too_long_for_the_index_gets_a_new_one(
    conversations: SqlConversationStore, tenant: str
) -> None:
    """PostgreSQL's btree refuses an index row over 2704 bytes, and item ids are indexed:
    a longer id than :data:`MAX_ITEM_ID_BYTES` is renamed, as a taken one is, on both
    databases; one as long as that is kept."""
    longest = "msg_" + "é" * ((MAX_ITEM_ID_BYTES - 4) // 2)
    too_long = "msg_" + secrets.token_hex(MAX_ITEM_ID_BYTES)  # random: no compression
    output = {"type": "local_shell_call_output", "id": too_long, "output": "ok"}
    await new(conversations, tenant, [message("long", too_long)])
    added = await conversations.add_items(
        tenant, "conv_1", [message("again", too_long), message("longest", longest), output]
    )
    assert added is not None
    loaded = await conversations.load_items(tenant, "conv_1")
    assert loaded is not None
    ids = [item["id"] for item in loaded.items]
    assert texts(loaded.items[:3]) == ["long", "again", "longest"]
    assert too_long not in ids
    assert ids[0].startswith("msg_")
    assert ids[1].startswith("msg_")
    assert ids[2] == longest == added[1]["id"]
    assert ids[3].startswith("item_")
    assert loaded.items[3]["call_id"] == too_long, "the output still answers its call"
