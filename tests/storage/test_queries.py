"""The hot path's statement budget: what save and load_context send to the database."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.ext.asyncio import AsyncEngine

from stateway.core.ports import ResponseRecord
from stateway.storage.sql import SqlResponseStore

RecordFactory = Callable[..., ResponseRecord]


@contextmanager
def statements(engine: AsyncEngine | Engine) -> Iterator[list[str]]:
    """The SQL statements executed inside the block (connect-time pragmas don't go
    through cursor events, and nothing before or after the block is counted)."""
    executed: list[str] = []
    target = engine.sync_engine if isinstance(engine, AsyncEngine) else engine

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        executed.append(statement)

    event.listen(target, "before_cursor_execute", record)
    try:
        yield executed
    finally:
        event.remove(target, "before_cursor_execute", record)


@contextmanager
def statements_written(store: SqlResponseStore) -> Iterator[list[str]]:
    """The SQL of the statements the store's writer runs inside the block."""
    executed: list[str] = []
    store.write_watchers.append(executed.append)
    try:
        yield executed
    finally:
        store.write_watchers.remove(executed.append)


async def save_chain(store: SqlResponseStore, record: RecordFactory, depth: int, name: str) -> str:
    """Responses ``{name}0`` ... each continuing the previous one; the last one's id."""
    previous = None
    for n in range(depth):
        response_id = f"{name}{n}"
        await store.save(record(response_id, previous, inputs=[f"q{n}"], outputs=[f"a{n}"]))
        previous = response_id
    assert previous is not None
    return previous


async def test_load_context_takes_one_statement_whatever_the_depth(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    await store.ping()  # warm the pool: first-connect work is not load_context's
    shallow = await save_chain(store, record, 1, "shallow")
    with statements(store.engine) as at_depth_1:
        context = await store.load_context(tenant, shallow)
    assert context is not None
    assert len(context.items) == 2

    deep = await save_chain(store, record, 50, "deep")
    with statements(store.engine) as at_depth_50:
        context = await store.load_context(tenant, deep)

    assert context is not None
    expected = [text for n in range(50) for text in (f"q{n}", f"a{n}")]
    assert [item["content"][0]["text"] for item in context.items] == expected
    assert len(at_depth_1) == len(at_depth_50) == 1


async def test_save_takes_two_statements_whatever_the_item_count(
    store: SqlResponseStore, record: RecordFactory
) -> None:
    await store.ping()
    with statements_written(store) as executed:
        await store.save(record("r1", inputs=["q"] * 20, outputs=["a"] * 5))

    assert [sql.split()[:3] for sql in executed] == [
        ["INSERT", "INTO", "responses"],
        ["INSERT", "INTO", "items"],
    ]


async def test_load_context_reads_the_responses_served_by_in_its_one_statement(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    """The candidate that served a response (a continuation's cache affinity hint) is
    written with its end and read with its chain, at no extra statement."""
    await store.ping()
    await store.save(replace(record("p0"), served_by="a/a-model"))  # no items: a NULL row
    started = replace(record("p1", "p0", inputs=["q"]), status="in_progress")
    await store.save(started)
    unfinished = await store.load_context(tenant, "p1")
    assert unfinished is not None
    assert unfinished.served_by is None
    answer = record("p1", outputs=["a"]).output_items
    finished = replace(
        started, status="completed", input_items=[], output_items=answer, served_by="b/org/model"
    )
    await store.finish(finished)

    with statements(store.engine) as executed:
        chain = await store.load_context(tenant, "p1")
    parent = await store.load_context(tenant, "p0")

    assert chain is not None
    assert parent is not None
    assert (chain.status, chain.served_by, len(chain.items)) == ("completed", "b/org/model", 2)
    assert (parent.items, parent.served_by) == ([], "a/a-model")
    assert len(executed) == 1


async def test_reads_open_no_transaction(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    """No ``BEGIN`` and ``ROLLBACK`` round trips around a read: PostgreSQL's run in
    autocommit, SQLite's driver begins a transaction for writes only."""
    await store.save(record("r1", inputs=["q"], outputs=["a"]))
    within: list[bool] = []

    def seen(connection: Any, *args: Any) -> None:
        driver = connection.connection.driver_connection
        is_in = getattr(driver, "is_in_transaction", None)  # asyncpg's; aiosqlite's is a property
        within.append(is_in() if is_in is not None else driver.in_transaction)

    event.listen(store.engine.sync_engine, "after_cursor_execute", seen)
    try:
        assert await store.get(tenant, "r1") is not None
        assert await store.load_context(tenant, "r1") is not None
    finally:
        event.remove(store.engine.sync_engine, "after_cursor_execute", seen)
    assert within == [False, False, False]
