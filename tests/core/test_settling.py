"""A run's failed end stored later, when its final save failed: ``store_failed`` and the
``Settler`` retrying it until the store takes it."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from stateway.core import events as ev
from stateway.core.commands import GenerationSettings
from stateway.core.errors import StorageError
from stateway.core.ports import EventBatch
from stateway.core.response import ResponseState, started_record
from stateway.core.settling import Settler, store_failed
from tests.core.fakes import MemoryStore

KEY = ("t", "resp_1")


def encode(seq: int, event: ev.Event) -> bytes:
    assert isinstance(event, ev.ResponseFinished)
    return orjson.dumps({"seq": seq, "status": event.response.status})


async def in_progress(store: MemoryStore, *, background: bool = False) -> ResponseState:
    state = ResponseState(
        "resp_1", "t", 1.0, "m", None, None, True, GenerationSettings(), background=background
    )
    await store.save(started_record(state, [], "owner"))
    state.status = "failed"
    state.error = {"code": "storage_unavailable", "message": "not stored", "status": 503}
    return state


async def test_a_journaled_run_s_log_gets_its_terminal_event_after_the_last_stored() -> None:
    store = MemoryStore()
    state = await in_progress(store)
    await store.append_events(*KEY, EventBatch(0, [b"e0", b"e1"]))  # a keyed stream's log
    terminal = await store_failed(store, state, encode)
    assert terminal == EventBatch(2, [encode(2, ev.ResponseFinished(state))])
    assert store.events[KEY][-1] == b'{"seq":2,"status":"failed"}'
    assert store.records[KEY].status == "failed"


@pytest.mark.parametrize(("background", "logged"), [(True, True), (False, False)])
async def test_an_empty_log_gets_a_terminal_event_only_for_a_background_run(
    background: bool, logged: bool
) -> None:
    store = MemoryStore()
    state = await in_progress(store, background=background)
    terminal = await store_failed(store, state, encode)
    assert (terminal is not None) is logged
    assert (KEY in store.events) is logged
    assert store.records[KEY].status == "failed"


async def test_a_row_ended_meanwhile_is_left_and_a_deleted_one_ended_without_a_log() -> None:
    store = MemoryStore()
    state = await in_progress(store)
    store.records[KEY].status = "completed"  # another process ended it first
    assert await store_failed(store, state, encode) is None
    assert store.records[KEY].status == "completed"
    store.records[KEY].status = "in_progress"
    await store.delete(*KEY)  # deleted while it ran: its log is never read again
    assert await store_failed(store, state, encode) is None
    assert store.records[KEY].status == "failed"
    assert KEY not in store.events


async def test_the_settler_tries_again_until_the_store_takes_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryStore()
    state = await in_progress(store)
    store.fail_final = True
    settler = Settler(store, encode, first_pause=0.01, max_pause=0.02)
    settler.settle(state, None)
    await asyncio.sleep(0.06)  # a few tries, all failed
    assert store.records[KEY].status == "in_progress"
    assert caplog.text.count("storing the failed end of response resp_1 failed again") >= 2
    store.fail_final = False
    await settler.settled()
    assert store.records[KEY].status == "failed"
    assert "stored the failed end of response resp_1" in caplog.text


async def test_closing_the_settler_gives_up_what_is_not_stored() -> None:
    store = MemoryStore(fail_final=True)
    state = await in_progress(store)
    settler = Settler(store, encode, first_pause=0.01)
    settler.settle(state, None)
    await settler.aclose()
    await settler.settled()  # nothing left waiting
    assert store.records[KEY].status == "in_progress"


async def test_a_read_that_fails_is_tried_again_like_a_save() -> None:
    store = MemoryStore()
    state = await in_progress(store)
    reads = 0
    read = store.read_events

    async def failing_once(*args: object) -> object:
        nonlocal reads
        reads += 1
        if reads == 1:
            raise StorageError("Storage failed while reading an event log.")
        return await read(*args)  # type: ignore[arg-type]

    store.read_events = failing_once  # type: ignore[method-assign,assignment]
    settler = Settler(store, encode, first_pause=0.01)
    settler.settle(state, None)
    await settler.settled()
    assert (reads, store.records[KEY].status) == (2, "failed")
