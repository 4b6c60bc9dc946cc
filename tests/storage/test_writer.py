"""The writers: watchers told each statement, and the SQLite writer's thread (one
connection, answered through the loop, closed cleanly)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import text

from stateway.core.errors import StorageError
from stateway.core.ports import ResponseRecord
from stateway.storage.sql import SqlResponseStore, migrate, open_store, queries
from stateway.storage.sql.engine import create_engine
from stateway.storage.sql.writer import _answer, writer_for

RecordFactory = Callable[..., ResponseRecord]


def _writer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "stateway-writer"]


async def test_closing_stops_the_thread_and_a_later_write_starts_another(
    tmp_path: Path, record: RecordFactory, tenant: str
) -> None:
    url = f"sqlite:///{tmp_path}/w.db"
    await migrate(url)
    store = open_store(url)
    before = len(_writer_threads())
    try:
        await store.save(record("r1", inputs=["q"]))
        assert len(_writer_threads()) == before + 1
        await store.aclose()
        assert len(_writer_threads()) == before, "aclose joins the writer's thread"

        await store.save(record("r2", inputs=["q"]))  # reconnects on a new thread
        assert await store.get(tenant, "r1") is not None
        assert await store.get(tenant, "r2") is not None
    finally:
        await store.aclose()
    assert len(_writer_threads()) == before


async def test_watchers_are_told_each_statement_sql_before_it_runs(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    """On both writers; a statement without rows (no items) is not run, nor told."""
    told: list[str] = []
    store.write_watchers.append(told.append)
    try:
        await store.save(record("with-items", inputs=["q"], outputs=["a"]))
        await store.save(record("without-items"))
    finally:
        store.write_watchers.remove(told.append)

    assert [sql.split("(")[0].strip() for sql in told] == [
        "INSERT INTO responses",
        "INSERT INTO items",
        "INSERT INTO responses",
    ]
    assert await store.get(tenant, "without-items") is not None


async def test_the_writer_thread_does_not_keep_the_process_alive(
    tmp_path: Path, record: RecordFactory
) -> None:
    """A store left open at exit (a crash, a script that forgot ``aclose``): the thread,
    blocked on its queue for ever, must not stop the interpreter from exiting."""
    url = f"sqlite:///{tmp_path}/w.db"
    await migrate(url)
    store = open_store(url)
    before = set(_writer_threads())
    try:
        await store.save(record("r1"))
        started = [t for t in _writer_threads() if t not in before]
        assert len(started) == 1
        assert started[0].daemon
    finally:
        await store.aclose()


async def test_a_writer_that_never_connected_closes_cleanly(
    tmp_path: Path, record: RecordFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database could not be opened (here the path is a directory): the save fails,
    and closing ends the thread without an exception of its own."""
    (tmp_path / "a-directory").mkdir()
    store = open_store(f"sqlite:///{tmp_path}/a-directory")
    crashed: list[threading.ExceptHookArgs] = []
    monkeypatch.setattr(threading, "excepthook", crashed.append)
    before = len(_writer_threads())
    with pytest.raises(StorageError):
        await store.save(record("r1"))
    assert len(_writer_threads()) == before + 1
    await store.aclose()
    assert len(_writer_threads()) == before
    assert crashed == []


def test_an_answer_for_a_closed_loop_is_dropped() -> None:
    """The loop closed while the thread wrote (shutdown): nobody waits, nothing raises."""
    loop = asyncio.new_event_loop()
    done = loop.create_future()
    loop.close()
    _answer(loop, done, None)
    assert not done.done()


async def test_an_answer_for_a_cancelled_wait_is_dropped() -> None:
    loop = asyncio.get_running_loop()
    failures: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, context: failures.append(context))
    try:
        done = loop.create_future()
        done.cancel()
        _answer(loop, done, RuntimeError("too late"))
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert done.cancelled()
    assert failures == []  # setting a cancelled future's outcome would raise in a callback


async def test_a_write_while_the_writer_closes_is_served_and_the_close_ends(
    tmp_path: Path,
) -> None:
    """A write coming as the writer is being closed, while its thread still writes, starts
    a thread of its own, served at once: neither the closing thread nor the new one takes
    the other's work (or its end), nor its connection."""
    url = f"sqlite:///{tmp_path}/w.db"
    await migrate(url)
    engine = create_engine(url)
    writer = writer_for(engine)
    loop = asyncio.get_running_loop()
    writing = asyncio.Event()
    release = threading.Event()

    def hold_the_first(_sql: str) -> None:
        if not release.is_set():
            loop.call_soon_threadsafe(writing.set)
            release.wait()

    writer.watchers.append(hold_the_first)
    probe = [(queries.INSERT_PROBE, [{"body": b"probe"}])]
    try:
        first = asyncio.create_task(writer.write(probe))
        await writing.wait()
        closing = asyncio.create_task(writer.aclose())
        await asyncio.sleep(0)  # it told the busy thread to end once done
        writer.watchers.remove(hold_the_first)
        await writer.write(probe)  # on a new thread, while the first still holds its own
        release.set()
        await first
        await closing
    finally:
        release.set()
        await writer.aclose()
        await engine.dispose()
    async with engine.connect() as connection:
        assert await connection.scalar(text("SELECT count(*) FROM write_probes")) == 2
    await engine.dispose()
