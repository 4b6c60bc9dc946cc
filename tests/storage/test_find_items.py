"""``find_items`` (what ``item_reference`` input items name) among conversation items, on
SQLite and PostgreSQL: the items the Conversations API added, after those of responses."""

from __future__ import annotations

import re
import sqlite3

import asyncpg
import orjson
import pytest
from sqlalchemy import Select, text
from sqlalchemy.dialects import postgresql, sqlite

from stateway.core.conversations.ports import Conversation
from stateway.core.items import Item
from stateway.storage.sql import SqlConversationStore, SqlResponseStore, references
from stateway.storage.sql.migrator import migrate
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


async def set_times(
    store: SqlResponseStore, tenant: str, table: str, column: str, times: dict[str, float]
) -> None:
    """The tenant's rows of ``table`` stored at these ``created_at`` times (by
    ``column``), whatever the clock."""
    cases = " ".join(f"WHEN '{key}' THEN {value}" for key, value in times.items())
    names = ", ".join(f"'{key}'" for key in times)
    async with store.engine.begin() as connection:
        await connection.execute(
            text(
                f"UPDATE {table} SET created_at = CASE {column} {cases} END"
                f" WHERE tenant_id = :tenant AND {column} IN ({names})"
            ),
            {"tenant": tenant},
        )


async def test_of_conversation_items_with_one_id_the_latest_is_found(
    store: SqlResponseStore, conversations: SqlConversationStore, tenant: str
) -> None:
    for conversation_id, content in (("conv_1", "older"), ("conv_2", "newer"), ("conv_0", "old")):
        await created(conversations, tenant, conversation_id, message("msg_x", content))
    await set_times(
        store,
        tenant,
        "conversation_items",
        "conversation_id",
        {"conv_0": 1.0, "conv_1": 2.0, "conv_2": 3.0},
    )

    assert contents(await store.find_items(tenant, ["msg_x"])) == {"msg_x": "newer"}

    assert await conversations.delete_item(tenant, "conv_2", "msg_x")
    assert contents(await store.find_items(tenant, ["msg_x"])) == {"msg_x": "older"}


async def test_copies_of_an_id_in_many_places_come_back_as_one_row(
    store: SqlResponseStore,
    conversations: SqlConversationStore,
    record: RecordFactory,
    tenant: str,
) -> None:
    """A thousand copies must not cost a thousand bodies: each statement ranks the copies
    and answers the winner's row alone, the latest copy."""
    names = [f"conv_{n}" for n in range(6)]
    for n, conversation_id in enumerate(names):
        await created(conversations, tenant, conversation_id, message("msg_x", f"copy {n}"))
    await set_times(
        store,
        tenant,
        "conversation_items",
        "conversation_id",
        {name: 10.0 - abs(n - 2) for n, name in enumerate(names)},
    )
    for n in range(4):
        await store.save(record(f"resp_{n}", inputs=[message("msg_y", f"input {n}")]))
    await set_times(
        store,
        tenant,
        "responses",
        "id",
        {"resp_0": 1.0, "resp_1": 4.0, "resp_2": 3.0, "resp_3": 2.0},
    )

    values = {"tenant": tenant, "ids": ["msg_x", "msg_y"]}
    async with store.engine.connect() as connection:
        in_conversations = (
            await connection.execute(references.FIND_CONVERSATION_ITEMS, values)
        ).all()
        in_inputs = (await connection.execute(references.FIND_INPUT_ITEMS, values)).all()
    assert [(item_id, orjson.loads(body)["content"]) for item_id, body in in_conversations] == [
        ("msg_x", "copy 2")
    ]
    assert [(item_id, orjson.loads(body)["content"]) for item_id, body in in_inputs] == [
        ("msg_y", "input 1")
    ]


LOCAL_SHELL_CALL: Item = {
    "id": "lsh_1",
    "type": "local_shell_call",
    "call_id": "call_1",
    "status": "completed",
    "action": {"type": "exec", "command": ["ls"], "env": {}},
}
LOCAL_SHELL_OUTPUT: Item = {"id": "lsh_1", "type": "local_shell_call_output", "output": "a\n"}
"""The call and its output share an id: the output's names the call it answers."""


async def test_a_reference_to_a_local_shell_call_finds_the_call_not_its_output(
    store: SqlResponseStore,
    conversations: SqlConversationStore,
    record: RecordFactory,
    tenant: str,
) -> None:
    await created(conversations, tenant, "conv_1", LOCAL_SHELL_CALL, LOCAL_SHELL_OUTPUT)
    assert await store.find_items(tenant, ["lsh_1"]) == {"lsh_1": LOCAL_SHELL_CALL}

    other = f"{tenant}-inputs"  # a client that resends its history: both are input items
    await store.save(record("r1", inputs=[LOCAL_SHELL_CALL, LOCAL_SHELL_OUTPUT], tenant_id=other))
    assert await store.find_items(other, ["lsh_1"]) == {"lsh_1": LOCAL_SHELL_CALL}


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


INDEXED = [
    (references.FIND_OUTPUT_ITEMS, "ix_items_output_item"),
    (references.FIND_INPUT_ITEMS, "ix_items_input_item"),
    (references.FIND_CONVERSATION_ITEMS, "ix_conversation_items_tenant_id_item_id_conversation_id"),
]
"""Each lookup, and the index on ids it must use: without one, every reference that it
does not find among the lookups before it scans the tenant's rows."""


@pytest.mark.parametrize(("query", "index"), INDEXED)
async def test_one_named_id_is_found_by_the_index_on_ids_on_sqlite(
    sqlite_url: str, query: Select[str, str], index: str
) -> None:
    """SQLite keeps no statistics: with one id named, a window's order would have it read
    the tenant's every row in key order rather than sort a few (the copies are
    materialized first so that it does not)."""
    await migrate(sqlite_url)
    bound = query.params(tenant="t", ids=["msg_1"])
    sql = bound.compile(dialect=sqlite.dialect(), compile_kwargs={"literal_binds": True})
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as connection:
        plan = [row[3] for row in connection.execute(f"EXPLAIN QUERY PLAN {sql}")]
    searches = [step for step in plan if step.startswith(("SEARCH", "SCAN"))]
    assert f"USING INDEX {index} (tenant_id=? AND item_id=?)" in searches[0], plan


@pytest.mark.postgres
@pytest.mark.parametrize(("query", "index"), INDEXED)
async def test_named_ids_are_found_by_the_index_on_ids_on_postgres(
    fresh_postgres_url: str, query: Select[str, str], index: str
) -> None:
    """Planned with sequential scans off, as for a large table: the lookup by id uses
    the index on ids, not the primary key's scan of the tenant's rows."""
    await migrate(fresh_postgres_url)
    bound = query.params(tenant="t", ids=["msg_1", "msg_2"])
    compiled = bound.compile(
        dialect=postgresql.dialect(),
        compile_kwargs={"literal_binds": True, "render_postcompile": True},
    )
    connection = await asyncpg.connect(fresh_postgres_url)
    try:
        async with connection.transaction():
            await connection.execute("SET LOCAL enable_seqscan = off")
            plan = "\n".join(row[0] for row in await connection.fetch(f"EXPLAIN {compiled}"))
    finally:
        await connection.close()
    assert re.search(rf"Index Scan (using|on) {index} ", plan), plan
