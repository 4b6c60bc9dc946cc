"""SqlResponseStore against the ResponseStore port, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import event, text

from stateway.core.errors import StorageError
from stateway.core.items import Item
from stateway.core.ports import ResponseRecord, StoredChain
from stateway.storage.sql import SqlResponseStore

RecordFactory = Callable[..., ResponseRecord]


def texts(chain: StoredChain | None) -> list[str]:
    assert chain is not None
    return [item["content"][0]["text"] for item in chain.items]


def labelled(*ids: str | None) -> list[Item]:
    return [{"type": "message", "role": "user", "content": "x", "id": i} for i in ids]


async def count_rows(store: SqlResponseStore, tenant: str, response_id: str) -> int:
    """The response's rows and item rows, read behind the store's back."""
    async with store.engine.connect() as connection:
        result = await connection.execute(
            text(
                "SELECT (SELECT count(*) FROM responses WHERE tenant_id = :t AND id = :r)"
                " + (SELECT count(*) FROM items WHERE tenant_id = :t AND response_id = :r)"
            ),
            {"t": tenant, "r": response_id},
        )
        return int(result.scalar_one())


async def test_save_then_get_round_trips_everything(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    unusual: Item = {"type": "some_future_item", "nested": {"a": [1, 2.5, None, True]}, "s": "é😀"}
    body: dict[str, Any] = {"id": "r1", "instructions": "Be brief.", "usage": {"total": 3}}
    saved = record("r1", "r0", inputs=["hello"], outputs=["hi there", unusual], body=body)
    await store.save(record("r0"))
    await store.save(saved)

    got = await store.get(tenant, "r1")

    assert got is not None
    assert (got.tenant_id, got.id, got.previous_response_id) == (tenant, "r1", "r0")
    assert (got.status, got.created_at, got.body) == ("completed", 1_700_000_000.25, body)
    assert got.output_items == saved.output_items
    assert got.input_items == []


async def test_get_unknown_is_none(store: SqlResponseStore, tenant: str) -> None:
    assert await store.get(tenant, "nope") is None
    assert await store.load_context(tenant, "nope") is None


async def test_tenants_are_isolated(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    a, b, c = f"{tenant}-a", f"{tenant}-b", f"{tenant}-c"
    await store.save(record("r1", inputs=["a's secret"], tenant_id=a))
    await store.save(record("r1", inputs=["b's own r1"], tenant_id=b))  # same id, no clash
    await store.save(record("r2", previous="r1", inputs=["b continues"], tenant_id=b))

    assert texts(await store.load_context(b, "r2")) == ["b's own r1", "b continues"]
    assert texts(await store.load_context(a, "r1")) == ["a's secret"]
    assert await store.get(c, "r1") is None
    assert await store.load_context(c, "r1") is None
    assert await store.list_input_items(c, "r1", after=None, limit=10, order="asc") is None
    assert await store.delete(c, "r1") is False
    assert await store.get(a, "r1") is not None


async def test_load_context_is_the_chain_oldest_first_inputs_before_outputs(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    await store.save(record("r1", inputs=["q1a", "q1b"], outputs=["a1a", "a1b"]))
    await store.save(record("r2", "r1", inputs=["q2"], outputs=["a2"]))
    await store.save(record("r3", "r2", inputs=["q3a", "q3b"], outputs=["a3"]))
    await store.save(record("side", "r1", inputs=["branch"], outputs=["other"]))

    assert texts(await store.load_context(tenant, "r3")) == [
        *("q1a", "q1b", "a1a", "a1b"),
        *("q2", "a2"),
        *("q3a", "q3b", "a3"),
    ]
    assert texts(await store.load_context(tenant, "side")) == [
        *("q1a", "q1b", "a1a", "a1b"),
        *("branch", "other"),
    ]


async def test_instructions_live_in_the_body_not_in_the_items(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    body = {"id": "r1", "instructions": "You are a pirate."}
    await store.save(record("r1", inputs=["q"], outputs=["a"], body=body))

    assert texts(await store.load_context(tenant, "r1")) == ["q", "a"]


async def test_responses_without_items_load_as_empty_context(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    await store.save(record("r1"))
    await store.save(record("r2", "r1", outputs=["a"]))
    await store.save(record("r3", "r2"))

    assert await store.load_context(tenant, "r1") == StoredChain([], "completed")
    assert texts(await store.load_context(tenant, "r3")) == ["a"]


async def test_delete_hides_the_response_but_not_its_items_from_descendants(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    await store.save(record("r1", inputs=["q1"], outputs=["a1"]))
    await store.save(record("r2", "r1", inputs=["q2"], outputs=["a2"]))

    assert await store.delete(tenant, "r1") is True
    assert await store.delete(tenant, "r1") is False
    assert await store.delete(tenant, "never") is False

    assert await store.get(tenant, "r1") is None
    assert await store.load_context(tenant, "r1") is None
    assert await store.list_input_items(tenant, "r1", after=None, limit=5, order="asc") is None
    assert texts(await store.load_context(tenant, "r2")) == ["q1", "a1", "q2", "a2"]


async def test_a_missing_ancestor_ends_the_chain(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    await store.save(record("orphan", "vanished", inputs=["q"], outputs=["a"]))

    assert texts(await store.load_context(tenant, "orphan")) == ["q", "a"]


async def test_a_corrupt_cycle_does_not_recurse_forever(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    await store.save(record("a", "b", outputs=["from a"]))
    await store.save(record("b", "a", outputs=["from b"]))

    context = await store.load_context(tenant, "a")

    assert context is not None
    assert texts(context)[-2:] == ["from b", "from a"]


async def test_input_item_pages_ascending(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    await store.save(record("r1", inputs=labelled("a", "b", "c", "d", "e"), outputs=["out"]))

    async def page(after: str | None) -> tuple[list[str], bool]:
        result = await store.list_input_items(tenant, "r1", after=after, limit=2, order="asc")
        assert result is not None
        return [item["id"] for item in result.items], result.has_more

    assert await page(None) == (["a", "b"], True)
    assert await page("b") == (["c", "d"], True)
    assert await page("d") == (["e"], False)
    assert await page("e") == ([], False)


async def test_input_item_pages_descending(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    await store.save(record("r1", inputs=labelled("a", "b", "c", "d", "e"), outputs=["out"]))

    async def page(after: str | None) -> tuple[list[str], bool]:
        result = await store.list_input_items(tenant, "r1", after=after, limit=2, order="desc")
        assert result is not None
        return [item["id"] for item in result.items], result.has_more

    assert await page(None) == (["e", "d"], True)
    assert await page("d") == (["c", "b"], True)
    assert await page("b") == (["a"], False)


async def test_input_item_page_edge_cases(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    await store.save(record("r1", inputs=labelled("x", None, "y", "x", "z")))
    await store.save(record("r2", "r1", outputs=["only output"]))

    async def ids(response_id: str, **kwargs: Any) -> tuple[list[str | None], bool] | None:
        result = await store.list_input_items(tenant, response_id, **kwargs)
        return None if result is None else ([i.get("id") for i in result.items], result.has_more)

    whole = ([None, "y", "x", "z"], False)
    assert await ids("r1", after="x", limit=10, order="asc") == whole  # after the first "x"
    assert await ids("r1", after="x", limit=10, order="desc") == (["y", None, "x"], False)
    assert await ids("r1", after=None, limit=5, order="asc") == (["x", None, "y", "x", "z"], False)
    assert await ids("r1", after="unknown", limit=10, order="asc") == ([], False)
    assert await ids("r2", after=None, limit=10, order="asc") == ([], False)
    assert await ids("missing", after=None, limit=10, order="asc") is None
    assert await ids("r1", after=None, limit=1, order="asc") == (["x"], True)
    assert await ids("r1", after="y", limit=1, order="desc") == ([None], True)
    with pytest.raises(ValueError, match="limit"):
        await store.list_input_items(tenant, "r1", after=None, limit=0, order="asc")


async def test_a_failed_save_writes_nothing(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    """The response row goes in, then the item insert fails: the row must not stay."""

    def fail_on_items(statement: str) -> None:
        if statement.startswith("INSERT INTO items"):
            raise ConnectionResetError("injected: connection lost mid-save")

    store.write_watchers.append(fail_on_items)
    try:
        with pytest.raises(StorageError):
            await store.save(record("r1", inputs=["q"], outputs=["a"]))
    finally:
        store.write_watchers.remove(fail_on_items)

    assert await count_rows(store, tenant, "r1") == 0
    await store.save(record("r1", inputs=["q"], outputs=["a"]))  # and the id is still free
    assert await count_rows(store, tenant, "r1") == 3


async def test_saving_a_duplicate_id_fails_and_keeps_the_original(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    await store.save(record("r1", inputs=["q"], outputs=["a"]))

    with pytest.raises(StorageError) as caught:
        await store.save(record("r1", inputs=["x", "y", "z"], outputs=["w"]))

    assert "INSERT" not in caught.value.message  # no SQL leaks to clients
    assert await count_rows(store, tenant, "r1") == 3
    assert texts(await store.load_context(tenant, "r1")) == ["q", "a"]


async def test_ping_asks_the_database_and_fails_once_it_is_gone(store: SqlResponseStore) -> None:
    statements: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    event.listen(store.engine.sync_engine, "before_cursor_execute", seen)
    try:
        assert await store.ping() is None
    finally:
        event.remove(store.engine.sync_engine, "before_cursor_execute", seen)
    # SQLite's SELECT 1; PostgreSQL's whether its transactions are read-only, then the
    # lock writes take, waited for a moment (test_locked_tables.py).
    assert statements[0].startswith("SELECT "), statements
    postgres = store.engine.dialect.name == "postgresql"
    assert len(statements) == (2 if postgres else 1), statements
    if postgres:
        assert statements[1].startswith("DO $$BEGIN PERFORM set_config('lock_timeout', '1000'")

    await store.engine.dispose()
    with pytest.raises(StorageError, match=r"^Storage failed while checking the database\."):
        await _ping_through_a_refusing_pool(store)


async def _ping_through_a_refusing_pool(store: SqlResponseStore) -> None:
    """Ping with every new connection refused, as when the database went away."""

    def refuse(*_args: Any) -> None:
        raise ConnectionRefusedError("injected: the database is gone")

    event.listen(store.engine.sync_engine, "do_connect", refuse)
    try:
        await store.ping()
    finally:
        event.remove(store.engine.sync_engine, "do_connect", refuse)


async def test_nul_bytes_in_keys_match_nothing_and_labels_with_them_still_save(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    assert await store.get(tenant, "r\x00") is None
    assert await store.load_context(tenant, "r\x00") is None
    assert await store.delete(tenant, "r\x00") is False
    assert await store.list_input_items(tenant, "r\x00", after=None, limit=5, order="asc") is None
    labelled = {"type": "message", "role": "user", "id": "a\x00b", "content": []}
    await store.save(record("nul-label", inputs=[labelled]))
    page = await store.list_input_items(tenant, "nul-label", after=None, limit=5, order="asc")
    assert page is not None
    assert page.items == [labelled]
    after = await store.list_input_items(tenant, "nul-label", after="a\x00b", limit=5, order="asc")
    assert after is not None
    assert (after.items, after.has_more) == ([], False)


async def test_a_served_by_holding_a_nul_byte_saves_as_no_hint(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    """A request's model names the candidate: one holding NUL (PostgreSQL text refuses it)
    still saves and finishes its response, leaving no affinity hint."""
    answered = record("nul-served", outputs=["hi"])
    answered.served_by = "default/m\x00x"
    await store.save(answered)
    started = record("nul-served-later", inputs=["hi"])
    started.status, started.owner = "in_progress", "owner-1"
    await store.save(started)
    started.status, started.served_by, started.output_items = "completed", "default/\x00", []
    assert await store.finish(started)
    for response_id in ("nul-served", "nul-served-later"):
        chain = await store.load_context(tenant, response_id)
        assert chain is not None
        assert (chain.status, chain.served_by) == ("completed", None)


async def test_an_item_whose_id_is_too_long_for_the_index_still_saves(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    """Item ids are indexed (references find items by them), and PostgreSQL refuses an
    index row over 2704 bytes: a client's longer id is stored unindexed, its item kept
    whole, rather than failing the response."""
    long_id = "i" * 3000
    given = {"type": "message", "role": "user", "id": long_id, "content": []}
    made = {"type": "message", "role": "assistant", "id": "o" * 3000, "content": []}
    await store.save(record("long-ids", inputs=[given], outputs=[made]))
    page = await store.list_input_items(tenant, "long-ids", after=None, limit=5, order="asc")
    assert page is not None
    assert page.items == [given]
    chain = await store.load_context(tenant, "long-ids")
    assert chain is not None
    assert await store.find_items(tenant, [long_id]) == {}
