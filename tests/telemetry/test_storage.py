"""The timed response store: every call forwarded and timed by operation, a failing one
too (its error unchanged)."""

from __future__ import annotations

import pytest

from stateway.core.errors import StorageError
from stateway.core.ports import ResponseRecord
from stateway.telemetry.storage import TimedStore
from tests.core.fakes import MemoryStore


def record(response_id: str) -> ResponseRecord:
    body = {"id": response_id, "model": "m", "status": "completed"}
    return ResponseRecord("t", response_id, None, "completed", 1.0, body)


async def test_calls_are_forwarded_and_timed_by_operation() -> None:
    observed: list[tuple[str, float]] = []
    store = TimedStore(
        MemoryStore(), lambda operation, seconds: observed.append((operation, seconds))
    )
    await store.save(record("resp_1"))
    assert (await store.get("t", "resp_1")) is not None
    assert await store.load_context("t", "resp_1") is not None
    page = await store.list_input_items("t", "resp_1", after=None, limit=10, order="asc")
    assert page is not None
    assert await store.delete("t", "resp_1")
    assert await store.get("t", "resp_1") is None
    await store.ping()
    assert [operation for operation, _ in observed] == [
        "save",
        "get",
        "load_context",
        "list_input_items",
        "delete",
        "get",
        "ping",
    ]
    assert all(seconds >= 0 for _, seconds in observed)


async def test_a_failed_call_is_timed_and_its_error_kept() -> None:
    observed: list[str] = []
    failing = MemoryStore(fail_final=True)
    store = TimedStore(failing, lambda operation, seconds: observed.append(operation))
    with pytest.raises(StorageError):
        await store.save(record("resp_2"))
    assert observed == ["save"]
