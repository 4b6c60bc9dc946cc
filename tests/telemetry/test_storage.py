"""The timed response store: every call forwarded and timed by operation, a failing one
too (its error unchanged)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from stateway.core.errors import StorageError
from stateway.core.ports import ResponseRecord
from stateway.telemetry import storage
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


class Answering:
    """A store answering each call with its name and its arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[object, ...], dict[str, object]]] = []

    def __getattr__(self, name: str) -> Callable[..., Awaitable[object]]:
        async def answer(*args: object, **kwargs: object) -> object:
            self.calls.append((name, args, kwargs))
            return (name, args, kwargs)

        return answer


@pytest.mark.parametrize(
    ("operation", "args", "kwargs", "answers"),
    [
        ("save", (record("resp_1"),), {}, False),
        ("finish", (record("resp_1"),), {}, True),
        ("in_progress", (), {}, True),
        ("append_events", ("t", "resp_1", ["event"]), {}, False),
        ("read_events", ("t", "resp_1", 3), {}, True),
        ("get", ("t", "resp_1"), {}, True),
        ("load_context", ("t", "resp_1"), {}, True),
        ("find_items", ("t", ["item_1"]), {}, True),
        ("delete", ("t", "resp_1"), {}, True),
        (
            "list_input_items",
            ("t", "resp_1"),
            {"after": "item_1", "limit": 5, "order": "desc"},
            True,
        ),
        ("ping", (), {}, False),
    ],
)
async def test_each_operation_is_forwarded_whole_and_timed_under_its_name(
    monkeypatch: pytest.MonkeyPatch,
    operation: str,
    args: tuple[object, ...],
    kwargs: dict[str, object],
    answers: bool,
) -> None:
    monkeypatch.setattr(storage, "perf_counter", iter([10.0, 10.25]).__next__)
    observed: list[tuple[str, float]] = []
    answering = Answering()
    store = TimedStore(answering, lambda name, seconds: observed.append((name, seconds)))  # type: ignore[arg-type]
    answer = await getattr(store, operation)(*args, **kwargs)
    assert answering.calls == [(operation, args, kwargs)]
    assert answer == ((operation, args, kwargs) if answers else None)
    assert observed == [(operation, 0.25)]
