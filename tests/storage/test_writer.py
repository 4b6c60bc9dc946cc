"""The SQLite writer's thread: one connection, answered through the loop, closed cleanly."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

from stateway.core.ports import ResponseRecord
from stateway.storage.sql import migrate, open_store
from stateway.storage.sql.writer import _answer

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
