"""``find_items`` (what ``item_reference`` input items name) among conversation items, on
SQLite and PostgreSQL: the items the Conversations API added, after those of responses."""

from __future__ import annotations

from sqlalchemy import text

from stateway.core.conversations.ports import Conversation
from stateway.core.items import Item
from stateway.storage.sql import SqlConversationStore, SqlResponseStore
from tests.storage.conftest import RecordFactory
from tests.storage.test_queries import statements


def message(item_id: str, text: str) -> Item:
    return {"id": item_id, "type": "message", "role": "user", "content": text}


async def created(
    conversations: SqlConversationStore, tenant: str, conversation_id: str, *items: Item
) -> None:
    conversation = Conversation(tenant, conversation_id, 1_700_000_000.5, {})
    await conversations.create(conversation, list(items))


def contents(found: dict[str, Item]) -> dict[str, object]:
    return {key: item["content"] for key, item in found.items()}


async def test_items_added_to_a_conversation_are_found_while_they_live(
    store: SqlResponseStore, conversations: SqlConversationStore, tenant: str
) -> None:
    await created(conversations, tenant, "conv_1", message("msg_a", "a"), message("msg_b", "b"))
    await created(conversations, tenant, "conv_2", message("msg_c", "c"))
    added = await conversations.add_items(tenant, "conv_1", [message("msg_d", "d")])
    assert added is not None
    await created(conversations, f"{tenant}-other", "conv_3", message("msg_e", "theirs"))

    found = await store.find_items(tenant, ["msg_a", "msg_b", "msg_c", "msg_d", "msg_e"])
    assert contents(found) == {"msg_a": "a", "msg_b": "b", "msg_c": "c", "msg_d": "d"}
    assert found["msg_a"] == message("msg_a", "a")  # the item as stored

    assert await conversations.delete_item(tenant, "conv_1", "msg_b")
    assert await conversations.delete(tenant, "conv_2")
    found = await store.find_items(tenant, ["msg_a", "msg_b", "msg_c", "msg_d"])
    assert contents(found) == {"msg_a": "a", "msg_d": "d"}


async def test_a_responses_item_comes_before_a_conversations(
    store: SqlResponseStore,
    conversations: SqlConversationStore,
    record: RecordFactory,
    tenant: str,
) -> None:
    await created(
        conversations, tenant, "conv_1", message("m_out", "added"), message("m_in", "added")
    )
    await store.save(
        record("r1", inputs=[message("m_in", "input")], outputs=[message("m_out", "output")])
    )

    found = await store.find_items(tenant, ["m_out", "m_in"])
    assert contents(found) == {"m_out": "output", "m_in": "input"}


async def test_of_conversation_items_with_one_id_the_latest_is_found(
    store: SqlResponseStore, conversations: SqlConversationStore, tenant: str
) -> None:
    for conversation_id, content in (("conv_1", "older"), ("conv_2", "newer"), ("conv_0", "old")):
        await created(conversations, tenant, conversation_id, message("msg_x", content))
    async with store.engine.begin() as connection:  # appended at these times, whatever the clock
        await connection.execute(
            text(
                "UPDATE conversation_items SET created_at = CASE conversation_id"
                " WHEN 'conv_0' THEN 1.0 WHEN 'conv_1' THEN 2.0 ELSE 3.0 END"
                " WHERE tenant_id = :tenant"
            ),
            {"tenant": tenant},
        )

    assert contents(await store.find_items(tenant, ["msg_x"])) == {"msg_x": "newer"}

    assert await conversations.delete_item(tenant, "conv_2", "msg_x")
    assert contents(await store.find_items(tenant, ["msg_x"])) == {"msg_x": "older"}


async def test_a_lookup_naming_ids_with_nul_finds_nothing(
    store: SqlResponseStore, conversations: SqlConversationStore, tenant: str
) -> None:
    await created(conversations, tenant, "conv_1", message("msg_a", "a"))
    assert await store.find_items(tenant, ["msg_\x00a"]) == {}
    assert contents(await store.find_items(tenant, ["msg_\x00a", "msg_a"])) == {"msg_a": "a"}


async def test_a_found_response_item_spares_the_conversation_lookup(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    await store.save(record("r1", outputs=[message("m_out", "output")]))
    with statements(store.engine) as executed:
        await store.find_items(tenant, ["m_out"])
    assert len(executed) == 1
