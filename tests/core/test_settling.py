"""A run's failed end stored later, when its final save failed: ``store_failed`` and the
``Settler`` retrying it until the store takes it."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from stateway.core import events as ev
from stateway.core import settling
from stateway.core.errors import StorageError
from stateway.core.generation_settings import GenerationSettings
from stateway.core.ports import EventBatch, ResponseRecord
from stateway.core.response import ResponseState, started_record
from stateway.core.settling import Settler, store_failed
from tests.core.fakes import MemoryStore
from tests.core.sharing_fakes import MemoryFanout

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


class EndedBetween(MemoryStore):
    """Another process ends the row (judging a lapsed lease) between the log's read and
    the save of the end."""

    async def finish(self, record: ResponseRecord) -> bool:
        self.records[KEY].status = "failed"
        return await super().finish(record)


async def test_a_row_ended_between_the_read_and_the_save_gives_no_terminal_event() -> None:
    """The save wrote nothing: no terminal event of it is published to followers."""
    store = EndedBetween()
    state = await in_progress(store, background=True)
    assert await store_failed(store, state, encode) is None
    assert KEY not in store.events


class CountingStore(MemoryStore):
    """A store whose ``finish`` fails while ``fail_final``; ``failed`` is set once it
    failed ``until`` times."""

    def __init__(self, until: int) -> None:
        super().__init__(fail_final=True)
        self.until = until
        self.failures = 0
        self.failed = asyncio.Event()

    async def finish(self, record: ResponseRecord) -> bool:
        try:
            return await super().finish(record)
        except StorageError:
            self.failures += 1
            if self.failures >= self.until:
                self.failed.set()
            raise


async def test_the_settler_tries_again_until_the_store_takes_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = CountingStore(until=6)  # each try saves twice: its log is read again
    state = await in_progress(store)
    await store.append_events(*KEY, EventBatch(0, [b"e0"]))
    fanout = MemoryFanout()
    settler = Settler(store, encode, fanout=fanout, first_pause=0.001, max_pause=0.002)
    settler.settle(state, None)
    await asyncio.wait_for(store.failed.wait(), 5)  # three tries, all failed
    assert store.records[KEY].status == "in_progress"
    assert caplog.text.count("storing the failed end of response resp_1 failed again") >= 3
    store.fail_final = False
    await settler.settled()
    assert store.records[KEY].status == "failed"
    assert "stored the failed end of response resp_1" in caplog.text
    assert "unexpectedly" not in caplog.text, "a retry that landed is no failure"
    terminal = EventBatch(1, [encode(1, ev.ResponseFinished(state))])
    assert fanout.published == [(*KEY, terminal, True)], "followers elsewhere are told"


async def test_each_failure_doubles_the_pause_up_to_the_most(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = CountingStore(until=5)  # no log: one save a try
    state = await in_progress(store)
    pauses: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(delay: float) -> None:
        pauses.append(delay)
        await real_sleep(0)

    monkeypatch.setattr(settling.asyncio, "sleep", sleep)
    settler = Settler(store, encode, first_pause=1.0, max_pause=5.0)
    settler.settle(state, None)
    await asyncio.wait_for(store.failed.wait(), 5)
    store.fail_final = False
    await settler.settled()
    monkeypatch.undo()
    assert pauses[:6] == [1.0, 2.0, 4.0, 5.0, 5.0, 5.0]
    assert store.records[KEY].status == "failed"


async def test_closing_the_settler_gives_up_what_is_not_stored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryStore(fail_final=True)
    state = await in_progress(store)
    settler = Settler(store, encode, first_pause=0.01)
    settler.settle(state, None)
    await settler.aclose()
    await settler.settled()  # nothing left waiting
    assert store.records[KEY].status == "in_progress"
    settler.settle(state, None)  # a run ending as the process stops
    await settler.settled()
    assert "response resp_1 is left in progress: the process is stopping" in caplog.text


async def test_an_unexpected_failure_is_logged_not_lost(caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStore()
    state = await in_progress(store)

    async def broken(*args: object) -> None:
        raise RuntimeError("a bug")

    store.read_events = broken  # type: ignore[method-assign,assignment]
    settler = Settler(store, encode, first_pause=0.001)
    settler.settle(state, None)
    await settler.settled()
    assert "storing a failed end failed unexpectedly" in caplog.text
    assert "a bug" in caplog.text


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


class LateCommit(MemoryStore):
    """A dead process's last batch of events committed between the log's read and the
    terminal event's save: that save collides with it (a duplicate sequence number)."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    async def finish(self, record: ResponseRecord) -> bool:
        if self.failures and record.events is not None:
            self.failures -= 1
            logged = len(self.events.get(KEY, []))
            await self.append_events(*KEY, EventBatch(logged, [b"late"]))
            raise StorageError("Storage rejected the data while saving a response.")
        return await super().finish(record)


async def test_a_terminal_event_beaten_by_a_late_commit_is_saved_after_it() -> None:
    store = LateCommit(failures=1)
    state = await in_progress(store, background=True)
    await store.append_events(*KEY, EventBatch(0, [b"e0"]))
    terminal = await store_failed(store, state, encode)
    assert terminal == EventBatch(2, [encode(2, ev.ResponseFinished(state))])
    assert store.events[KEY] == [b"e0", b"late", b'{"seq":2,"status":"failed"}']
    assert store.records[KEY].status == "failed"


async def test_a_terminal_event_that_fails_twice_is_the_storage_error() -> None:
    store = LateCommit(failures=2)
    state = await in_progress(store, background=True)
    with pytest.raises(StorageError):
        await store_failed(store, state, encode)
    assert store.records[KEY].status == "in_progress"
