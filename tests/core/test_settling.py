"""A run's failed end stored later, when its final save failed: ``store_failed`` and the
``Settler`` retrying it until the store takes it."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from stateway.core import events as ev
from stateway.core import settling
from stateway.core.errors import StorageError, StorageRejected
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


class RefusingStore(MemoryStore):
    """A store that refuses the data of an end (a value the database cannot hold): one with
    output while ``refuse_output``, any while ``refuse_all``; ``outages`` ends fail as an
    outage first. ``tries`` counts the ends given."""

    def __init__(self, *, refuse_all: bool = False, outages: int = 0) -> None:
        super().__init__()
        self.refuse_all = refuse_all
        self.outages = outages
        self.tries: list[ResponseRecord] = []

    async def finish(self, record: ResponseRecord) -> bool:
        self.tries.append(record)
        if self.outages:
            self.outages -= 1
            raise StorageError("Storage failed while saving a response.")
        if self.refuse_all or record.output_items:
            raise StorageRejected("Storage rejected the data while saving a response.")
        return await super().finish(record)


def stored_error() -> dict[str, object]:
    return {
        "code": "storage_unavailable",
        "message": "The response could not be stored: the database refused its output,"
        " which is left out.",
        "status": 503,
    }


async def with_output(store: MemoryStore, *, background: bool = False) -> ResponseState:
    state = await in_progress(store, background=background)
    state.output = [{"type": "message", "id": "msg_1", "role": "assistant", "content": []}]
    return state


async def test_an_end_whose_data_is_refused_is_stored_without_its_output(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Sent again, the same output is refused again: the end is stored without it, at once,
    so the row is failed (its conversation let go), not left in progress for ever."""
    store = RefusingStore()
    state = await with_output(store, background=True)
    fanout = MemoryFanout()
    settler = Settler(store, encode, fanout=fanout, first_pause=0.001, max_pause=0.002)
    settler.settle(state, None)
    await asyncio.wait_for(settler.settled(), 5)
    stored = store.records[KEY]
    assert stored.status == "failed"
    assert stored.output_items == []
    assert stored.body["error"] == stored_error()
    tried = [bool(r.output_items) for r in store.tries]
    assert tried == [True, True, False], "refused, and again after its log is read anew"
    assert state.output, "the run's own state is left as its clients saw it"
    assert settler.pending(*KEY) is None
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert [r.getMessage() for r in errors] == [
        "the database refused the end of response resp_1 (Storage rejected the data while"
        " saving a response.): storing it without its output"
    ]
    assert "failed again" not in caplog.text
    (published,) = fanout.published
    assert orjson.loads(published[2].payloads[0]) == {"seq": 0, "status": "failed"}


async def test_a_pending_end_becomes_the_one_stored_once_its_output_is_refused() -> None:
    """A retrieve meanwhile is answered with the end that will be stored: without output."""
    store = RefusingStore()
    state = await with_output(store)
    gate, reached = asyncio.Event(), asyncio.Event()
    finish = store.finish

    async def held(record: ResponseRecord) -> bool:
        if not record.output_items:
            reached.set()
            await gate.wait()
        return await finish(record)

    store.finish = held  # type: ignore[method-assign]
    settler = Settler(store, encode, first_pause=0.001)
    settler.settle(state, None)
    assert settler.pending(*KEY) is state
    await asyncio.wait_for(reached.wait(), 5)
    shown = settler.pending(*KEY)
    assert shown is not None
    assert (shown.output, shown.status, shown.error) == ([], "failed", stored_error())
    gate.set()
    await asyncio.wait_for(settler.settled(), 5)
    assert settler.pending(*KEY) is None


async def test_an_end_refused_even_without_its_output_is_given_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = RefusingStore(refuse_all=True)
    state = await with_output(store)
    settler = Settler(store, encode, first_pause=0.001, max_pause=0.002)
    settler.settle(state, None)
    await asyncio.wait_for(settler.settled(), 5)
    assert len(store.tries) == 2
    assert store.records[KEY].status == "in_progress"
    assert settler.pending(*KEY) is None, "nothing is held for it"
    assert (
        "the database refused the end of response resp_1 even without its output: it is left"
        " in progress (Storage rejected the data while saving a response.)" in caplog.text
    )
    assert "unexpectedly" not in caplog.text


async def test_an_outage_after_a_refusal_is_retried_without_the_output() -> None:
    store = RefusingStore(outages=1)
    state = await with_output(store)
    settler = Settler(store, encode, first_pause=0.001, max_pause=0.002)
    settler.settle(state, None)
    await asyncio.wait_for(settler.settled(), 5)
    assert [bool(r.output_items) for r in store.tries] == [True, True, False]
    assert store.records[KEY].status == "failed"
    assert store.records[KEY].output_items == []
