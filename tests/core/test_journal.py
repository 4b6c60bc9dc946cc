"""A background run's journal: encoded once, written in batches, closed with its end."""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable

import orjson
import pytest

from stateway.core import events as ev
from stateway.core.commands import CreateResponse
from stateway.core.journal import RunJournal
from stateway.core.ports import ResponseRecord
from stateway.core.response import ResponseState
from stateway.core.run_registry import RunRegistry
from stateway.core.runs import Run
from stateway.protocols.responses.stream import encode_event_json, encode_sse, encode_sse_payload
from tests.collector import collector_off, freed
from tests.core.fakes import MemoryStore
from tests.core.sharing_fakes import MemoryFanout


def delta(n: int) -> ev.TextDelta:
    return ev.TextDelta(0, 0, "msg_1", f"w{n} ")


async def started(
    store: MemoryStore, *, interval: float = 0.0, deferred: RunRegistry | None = None
) -> tuple[Run, RunJournal]:
    state = ResponseState.start(
        "resp_1", "t", 1.0, CreateResponse("m", [], stream=True, background=True)
    )
    await store.save(ResponseRecord("t", "resp_1", None, "in_progress", 1.0, {}))
    run = Run(state, [])
    journal = RunJournal(run, store, encode_event_json, interval=interval, deferred=deferred)
    run.journal = journal
    return run, journal


async def until(condition: Callable[[], bool]) -> None:
    """Let the loop run until ``condition()`` holds (bounded)."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")


async def test_events_logged_together_are_written_in_one_batch() -> None:
    store = MemoryStore()
    run, journal = await started(store)
    run.emit(ev.ResponseCreated(run.state))
    run.emit(ev.ResponseInProgress(run.state))
    for n in range(100):
        run.emit(delta(n))
    await until(lambda: journal.persisted == 102)

    assert [(batch.first, len(batch.payloads)) for batch in store.appends] == [(0, 102)]
    assert store.events["t", "resp_1"] == journal.wire
    await journal.stop()


async def test_close_returns_what_is_not_stored_then_the_terminal_event() -> None:
    store = MemoryStore()
    run, journal = await started(store)
    run.emit(ev.ResponseCreated(run.state))
    await until(lambda: journal.persisted == 1)
    run.emit(delta(1))
    run.emit(delta(2))

    run.state.status = "completed"
    terminal = ev.ResponseFinished(run.state)
    rest = await journal.close(terminal)

    assert rest is not None
    assert (rest.first, rest.end) == (1, 4)
    assert orjson.loads(rest.payloads[-1])["type"] == "response.completed"
    assert len(store.appends) == 1, "no batch is written once closed"
    journal.sealed()
    run.emit(terminal)
    assert journal.encoded(0, 4) == [*journal.wire[:3], rest.payloads[-1]]
    assert journal.encoded(1, 4) == rest.payloads


async def test_a_batch_being_written_when_the_run_ends_is_awaited_not_repeated() -> None:
    store = MemoryStore()
    store.events_gate = asyncio.Event()
    run, journal = await started(store)
    run.emit(ev.ResponseCreated(run.state))
    await until(lambda: journal._writing is not None)
    run.emit(delta(1))

    closing = asyncio.create_task(journal.close(ev.ResponseFinished(run.state)))
    await asyncio.sleep(0)
    assert not closing.done()
    store.events_gate.set()
    rest = await closing

    assert [b.first for b in store.appends] == [0]
    assert len(store.events["t", "resp_1"]) == 1
    assert (rest.first, rest.end) == (1, 3)


async def test_a_failed_batch_is_written_again_with_the_end() -> None:
    store = MemoryStore()
    store.fail_events = True
    run, journal = await started(store)
    run.emit(ev.ResponseCreated(run.state))
    run.emit(delta(1))
    await until(lambda: journal._writing is not None)
    await until(lambda: journal._writing is None)
    assert journal.persisted == 0

    rest = await journal.close(ev.ResponseFinished(run.state))

    assert (rest.first, rest.end) == (0, 3)


async def test_the_wire_is_what_a_live_stream_sends_byte_for_byte() -> None:
    store = MemoryStore()
    run, journal = await started(store, interval=3600)
    logged: list[ev.Event] = [
        ev.ResponseCreated(run.state),
        ev.ResponseQueued(run.state),
        ev.ResponseInProgress(run.state),
        ev.ItemAdded(0, {"id": "msg_1", "type": "message", "content": []}),
        delta(1),
        ev.ToolProgress("response.mcp_call.completed", 1, "mcp_1"),
    ]
    for event in logged:
        run.emit(event)
    run.state.status = "completed"  # a snapshot stays as first announced
    framed = [encode_sse_payload(p) for p in journal.encoded(0, len(logged))]
    assert framed == [encode_sse(seq, event) for seq, event in enumerate(logged)]
    statuses = [orjson.loads(p)["response"]["status"] for p in journal.wire[:3]]
    assert statuses == ["queued", "queued", "in_progress"]  # as announced, in turn
    assert orjson.loads(journal.wire[0])["response"]["background"] is True
    await journal.stop()


def test_a_payload_of_another_writer_is_framed_by_its_type() -> None:
    payload = b'{"sequence_number":3,"type":"response.output_text.delta"}'
    assert encode_sse_payload(payload) == (
        b"event: response.output_text.delta\ndata: " + payload + b"\n\n"
    )


async def test_committed_batches_are_published_and_the_end_once_sealed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, fanout = MemoryStore(), MemoryFanout()
    state = ResponseState.start(
        "resp_1", "t", 1.0, CreateResponse("m", [], stream=True, background=True)
    )
    await store.save(ResponseRecord("t", "resp_1", None, "in_progress", 1.0, {}))
    run = Run(state, [])
    journal = RunJournal(run, store, encode_event_json, interval=0.0, fanout=fanout)
    run.emit(ev.ResponseCreated(run.state))
    run.emit(delta(1))
    await until(lambda: journal.persisted == 2)
    assert [(b.first, b.payloads, last) for _, _, b, last in fanout.published] == [
        (0, journal.wire[:2], False)
    ]

    store.fail_events = True  # a batch that fails to be written is not published
    run.emit(delta(2))
    await until(lambda: "writing events of response resp_1 failed" in caplog.text)
    assert len(fanout.published) == 1

    run.state.status = "completed"
    rest = await journal.close(ev.ResponseFinished(run.state))
    assert len(fanout.published) == 1, "the end is published only once stored"
    journal.sealed()
    assert fanout.published[-1] == ("t", "resp_1", rest, True)
    assert rest.first == 2


async def test_a_journal_kept_in_memory_publishes_nothing() -> None:
    fanout = MemoryFanout()
    state = ResponseState.start("resp_1", "t", 1.0, CreateResponse("m", [], stream=True))
    run = Run(state, [])
    journal = RunJournal(run, None, encode_event_json, fanout=fanout)
    run.emit(ev.ResponseCreated(run.state))
    await journal.close(ev.ResponseFinished(run.state))
    journal.sealed()
    assert fanout.published == []


def announced(run: Run, deltas: int) -> None:
    run.emit(ev.ResponseCreated(run.state))
    run.emit(ev.ResponseInProgress(run.state))
    for n in range(deltas):
        run.emit(delta(n))


async def test_a_deferred_journal_nobody_keeps_stores_nothing() -> None:
    store = MemoryStore()
    run, journal = await started(store, deferred=RunRegistry())
    announced(run, 5)
    await asyncio.sleep(0.01)

    terminal = ev.ResponseFinished(run.state)
    assert await journal.close(terminal) is None
    journal.sealed()
    run.emit(terminal)

    assert store.appends == []
    assert len(journal.encoded(0, 8)) == 8  # still every watcher's, terminal included


@pytest.mark.usefixtures("young_heap")
async def test_a_deferred_journal_nobody_keeps_lets_its_run_go_once_closed() -> None:
    """WebSocket mode defers every create's journal, and the run holds its journal: the
    run it would have started its writer over must not be held past the run's end, or
    each stored turn (its whole context with it) lives on in a reference cycle until the
    collector runs."""
    with collector_off():
        run, journal = await started(MemoryStore(), deferred=RunRegistry())
        announced(run, 2)
        terminal = ev.ResponseFinished(run.state)
        assert await journal.close(terminal) is None
        journal.sealed()
        run.emit(terminal)
        ref = weakref.ref(run)
        del run, journal, terminal

        assert await freed(ref)


async def test_a_deferred_journal_kept_while_running_stores_its_whole_log() -> None:
    store = MemoryStore()
    run, journal = await started(store, deferred=RunRegistry())
    announced(run, 5)
    assert journal.keep() is None  # stored with the final save
    await until(lambda: journal.persisted == 7)
    run.emit(delta(5))

    rest = await journal.close(ev.ResponseFinished(run.state))

    assert rest is not None
    assert (rest.first, len(rest.payloads)) == (7, 2)  # delta 5, and the terminal event
    assert store.events["t", "resp_1"] == journal.wire[:7]


async def test_a_deferred_journal_kept_after_its_final_save_stores_it_all_once_sealed() -> None:
    store = MemoryStore()
    run, journal = await started(store, deferred=RunRegistry())
    announced(run, 3)
    terminal = ev.ResponseFinished(run.state)
    assert await journal.close(terminal) is None
    stored = journal.keep()  # the final save under way: nothing yet
    assert stored is not None
    assert store.appends == []

    journal.sealed()
    run.emit(terminal)
    await stored  # done once the log is readable

    [batch] = store.appends
    assert (batch.first, batch.payloads) == (0, journal.encoded(0, 6))
    assert batch.payloads[-1] == encode_event_json(5, terminal)  # the terminal event, last
    journal.keep()  # idempotent
    await asyncio.sleep(0)
    assert len(store.appends) == 1


async def test_a_log_kept_after_its_final_save_is_written_held_by_its_own_gateway_s_runs() -> None:
    """The write of a log kept once its run's final save had begun was held in a set of
    the module's, shared by every gateway in the process: it is held by the registry of
    the run's gateway until it is done, and another gateway's holds nothing of it."""
    store = MemoryStore()
    store.events_gate = asyncio.Event()  # the write waits
    runs, other = RunRegistry(), RunRegistry()
    run, journal = await started(store, deferred=runs)
    announced(run, 2)
    terminal = ev.ResponseFinished(run.state)
    assert await journal.close(terminal) is None
    stored = journal.keep()
    assert stored is not None
    journal.sealed()
    run.emit(terminal)
    await asyncio.sleep(0)

    assert len(runs._writes) == 1
    assert not other._writes
    store.events_gate.set()
    await stored
    await asyncio.sleep(0)
    assert not runs._writes
    assert len(store.events["t", "resp_1"]) == 5


@pytest.mark.parametrize("fails", [False, True])
async def test_a_late_log_write_that_failed_is_logged_and_one_that_did_not_is_not(
    fails: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A log kept after its run's final save is written apart: its failure, raised
    nowhere, is logged naming the response; whoever waits for it is let go either way."""
    store = MemoryStore()
    store.fail_events = fails
    run, journal = await started(store, deferred=RunRegistry())
    announced(run, 2)
    terminal = ev.ResponseFinished(run.state)
    assert await journal.close(terminal) is None
    stored = journal.keep()
    assert stored is not None
    with caplog.at_level(logging.WARNING, logger="stateway.core.journal"):
        journal.sealed()
        run.emit(terminal)
        await stored
        await asyncio.sleep(0)

    failures = [r.getMessage() for r in caplog.records if r.name == "stateway.core.journal"]
    said = "storing the event log of response resp_1 failed: Storage failed"
    assert [message.startswith(said) for message in failures] == ([True] if fails else [])
