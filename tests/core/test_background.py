"""Background runs through ``Gateway.execute``: stored from the start, a persisted event log
replayed identically from any position, cancelled on request."""

from __future__ import annotations

import asyncio
import copy
import weakref

import orjson
import pytest

from stateway.core import events as ev
from stateway.core.commands import (
    CancelResponse,
    CreateResponse,
    DeleteResponse,
    GetResponse,
    WatchResponse,
)
from stateway.core.errors import InvalidRequest, NotFound, StorageError
from stateway.core.gateway import Gateway
from stateway.core.inference import Finish, TextDelta
from stateway.core.journal import EventEncoder
from stateway.core.loop import Loop
from stateway.core.ports import EventBatch, ResponseRecord
from stateway.core.principal import Principal
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.core.runs import Run
from stateway.core.settling import Settler
from stateway.core.watch import LiveWatch, StoredWatch, Watch
from stateway.protocols.responses.stream import encode_event_json
from tests.collector import collector_off, freed
from tests.core.fakes import HeldReads, MemoryStore, ScriptedBackend
from tests.core.sharing_fakes import MemoryFanout

ME = Principal()


def user(text: str) -> dict[str, object]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def gateway_for(
    backend: ScriptedBackend, store: MemoryStore, encoder: EventEncoder | None = encode_event_json
) -> Gateway:
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    return Gateway(store, router, Loop(store), RunRegistry(), encoder=encoder)


async def create(gateway: Gateway, **fields: object) -> Run:
    command = CreateResponse(model="m", input=[user("hi")], **fields)  # type: ignore[arg-type]
    return await gateway.execute(ME, command)


async def ended(run: Run) -> None:
    """Wait until the run is over and gone from the registry."""
    task = run.task
    await run.wait()
    if task is not None:
        await asyncio.wait([task])


async def until_output(run: Run) -> None:
    """Until ``run`` has streamed text: at once, turn by turn of the event loop, as a
    scripted run gets there; then, for one that waits on real time (a tool's call under a
    loaded machine), in small sleeps, up to a bound on a hang."""
    for turn in range(2000):
        if any(isinstance(e, ev.TextDelta) for e in run.events):
            return
        await asyncio.sleep(0 if turn < 1000 else 0.01)
    raise AssertionError("no output came")


async def payloads(watch: Watch) -> list[bytes]:
    seen: list[bytes] = []
    flags: list[bool] = []
    async for batch, last in watch.batches():
        seen += batch
        flags.append(last)
    assert flags == [False] * (len(flags) - 1) + [True] * bool(flags), "only the last says so"
    return seen


def types(log: list[bytes]) -> list[str]:
    return [orjson.loads(p)["type"] for p in log]


def script(*words: str) -> list[TextDelta | Finish]:
    return [*(TextDelta(w) for w in words), Finish("stop")]


async def test_a_background_run_is_stored_first_and_logs_every_event() -> None:
    saved: list[tuple[str, bool]] = []
    store = MemoryStore(on_save=lambda r: saved.append((r.status, r.body["background"])))
    gateway = gateway_for(ScriptedBackend(script("a", "b")), store)

    run = await create(gateway, background=True)
    await ended(run)

    # queued as created, in progress once started, then its end (as hosted)
    assert saved == [("queued", True), ("in_progress", True), ("completed", True)]
    assert run.state.status == "completed"
    logged = store.events[ME.tenant_id, run.id]
    assert [orjson.loads(p)["sequence_number"] for p in logged] == list(range(len(run.events)))
    assert run.journal is not None
    assert logged == run.journal.wire
    assert types(run.journal.wire)[-1] == "response.completed"
    assert orjson.loads(run.journal.wire[-1])["response"]["background"] is True


@pytest.mark.parametrize(
    ("fields", "logged"),
    [
        ({"background": True}, True),
        ({"stream": True, "replayable": True}, True),  # sent with a command id
        ({"stream": True, "journaled": True}, False),  # stored only if a watcher keeps it
        ({"stream": True, "replayable": True, "store": False}, False),  # kept in memory
    ],
)
async def test_a_journaled_runs_log_is_stored_and_published_to_other_processes(
    fields: dict[str, object], logged: bool
) -> None:
    store, fanout = MemoryStore(), MemoryFanout()
    router = Router([BackendEntry(ScriptedBackend(script("a")), {}, catch_all=True)])
    gateway = Gateway(
        store, router, Loop(store), RunRegistry(), encoder=encode_event_json, fanout=fanout
    )
    run = await create(gateway, **fields)
    await ended(run)
    assert run.state.status == "completed"
    assert run.journal is not None
    stored = store.events.get((ME.tenant_id, run.id), [])
    assert stored == (run.journal.wire if logged else [])
    published = [
        p for (_, key, batch, _) in fanout.published if key == run.id for p in batch.payloads
    ]
    assert published[-1:] == (run.journal.wire[-1:] if logged else [])
    assert [last for *_, last in fanout.published][-1:] == ([True] if logged else [])


async def test_live_watchers_and_a_later_replay_see_the_same_log() -> None:
    gate = asyncio.Event()
    store = MemoryStore()
    gateway = gateway_for(ScriptedBackend(script("a", "b", "c"), gate), store)
    run = await create(gateway, background=True)
    await until_output(run)

    first = asyncio.create_task(payloads(await gateway.execute(ME, WatchResponse(run.id))))
    middle = asyncio.create_task(payloads(await gateway.execute(ME, WatchResponse(run.id, 3))))
    gate.set()
    await ended(run)
    assert gateway.runs.get(run.id) is None
    replayed = await payloads(await gateway.execute(ME, WatchResponse(run.id)))
    resumed = await payloads(await gateway.execute(ME, WatchResponse(run.id, 3)))

    assert await first == replayed
    assert await middle == resumed == replayed[4:]
    announced = ["response.created", "response.queued", "response.in_progress"]
    assert types(replayed)[:3] == announced
    statuses = [orjson.loads(p)["response"]["status"] for p in replayed[:3]]
    assert statuses == ["queued", "queued", "in_progress"]
    assert [orjson.loads(p)["sequence_number"] for p in replayed] == list(range(len(replayed)))
    last = await payloads(await gateway.execute(ME, WatchResponse(run.id, len(replayed) - 1)))
    assert last == []


async def test_a_resume_from_the_terminal_event_is_refused_when_asked() -> None:
    """Over HTTP a watch from the terminal event is an empty stream, which ends; a
    WebSocket resume (``refuse_at_end``) has no end of stream to say so, so it is refused:
    whether the run is still in the registry or read from the store."""
    store = MemoryStore()
    gateway = gateway_for(ScriptedBackend(script("a")), store)
    run = await create(gateway, background=True)
    await ended(run)
    last = len(run.events) - 1
    resume = WatchResponse(run.id, last, replay=True, refuse_at_end=True)
    with pytest.raises(InvalidRequest) as stored:
        await gateway.execute(ME, resume)
    gateway.runs.add(run)  # as while its journal stops: ended, still in the registry
    with pytest.raises(InvalidRequest) as live:
        await gateway.execute(ME, resume)
    gateway.runs.discard(run)
    for caught in (live, stored):
        assert (caught.value.param, caught.value.code) == ("starting_after", "invalid_value")
        assert f"{last} is the last event of response '{run.id}'" in caught.value.message
        assert "has ended (completed)" in caught.value.message
    assert await payloads(await gateway.execute(ME, WatchResponse(run.id, last))) == []
    before = WatchResponse(run.id, last - 1, replay=True, refuse_at_end=True)
    assert types(await payloads(await gateway.execute(ME, before))) == ["response.completed"]


async def test_watching_is_refused_for_what_has_no_log() -> None:
    gate = asyncio.Event()
    store = MemoryStore()
    gateway = gateway_for(ScriptedBackend(script("a"), gate), store)
    foreground = await create(gateway, stream=True)
    background = await create(gateway, background=True)
    await until_output(foreground)
    await until_output(background)

    with pytest.raises(NotFound):
        await gateway.execute(ME, WatchResponse("resp_unknown"))
    await refused_without_a_log(gateway, foreground.id)
    with pytest.raises(InvalidRequest) as caught:
        await gateway.execute(ME, WatchResponse(background.id, len(background.events)))
    assert caught.value.param == "starting_after"

    gate.set()
    await ended(foreground)
    await ended(background)
    await refused_without_a_log(gateway, foreground.id)
    with pytest.raises(InvalidRequest) as caught:
        await gateway.execute(ME, WatchResponse(background.id, len(background.events)))
    assert caught.value.param == "starting_after"
    await gateway.execute(ME, DeleteResponse(background.id))
    with pytest.raises(NotFound):
        await gateway.execute(ME, WatchResponse(background.id))


async def refused_without_a_log(gateway: Gateway, response_id: str) -> None:
    """Watching ``response_id`` is refused, saying what each kind of caller could stream:
    over HTTP a background response; a replay (``response.resume``) any with a log."""
    with pytest.raises(InvalidRequest) as caught:
        await gateway.execute(ME, WatchResponse(response_id))
    assert (caught.value.param, caught.value.code) == ("stream", "unsupported_parameter")
    assert caught.value.message.startswith("Only a response created with background=true")
    assert f"GET /v1/responses/{response_id} without 'stream'" in caught.value.message
    with pytest.raises(InvalidRequest) as caught:
        await gateway.execute(ME, WatchResponse(response_id, replay=True))
    assert (caught.value.param, caught.value.code) == ("stream", "unsupported_parameter")
    assert caught.value.message.startswith(f"Response '{response_id}' has no event log")
    assert "a stream created with a command id" in caught.value.message


async def test_a_running_background_response_deleted_is_no_longer_watched() -> None:
    gateway = gateway_for(ScriptedBackend(script("a"), asyncio.Event()), MemoryStore())
    run = await create(gateway, background=True)
    await until_output(run)
    await gateway.execute(ME, DeleteResponse(run.id))
    assert gateway.runs.get(run.id) is run  # still ending
    with pytest.raises(NotFound):
        await gateway.execute(ME, WatchResponse(run.id))
    await ended(run)
    assert run.state.status == "cancelled"


async def test_background_needs_store_and_an_encoder() -> None:
    backend = ScriptedBackend(script("a"))
    with pytest.raises(InvalidRequest) as caught:
        await create(gateway_for(backend, MemoryStore()), background=True, store=False)
    assert (caught.value.param, caught.value.code) == ("background", "invalid_value")
    with pytest.raises(InvalidRequest) as caught:
        await create(gateway_for(backend, MemoryStore(), encoder=None), background=True)
    assert (caught.value.param, caught.value.code) == ("background", "unsupported_parameter")


async def test_cancel_stops_the_run_and_keeps_its_partial_output() -> None:
    gate = asyncio.Event()
    backend = ScriptedBackend([TextDelta("partial")], gate)
    store = MemoryStore()
    gateway = gateway_for(backend, store)
    run = await create(gateway, background=True)
    await until_output(run)

    state = await gateway.execute(ME, CancelResponse(run.id))

    assert backend.closed.is_set()
    assert not gate.is_set()
    assert state.status == "cancelled"
    assert state.output[0]["status"] == "incomplete"
    assert state.output[0]["content"][0]["text"] == "partial"
    await ended(run)
    stored = store.records[ME.tenant_id, run.id]
    assert stored.status == "cancelled"
    assert stored.output_items == state.output
    terminal = orjson.loads(store.events[ME.tenant_id, run.id][-1])
    assert terminal["response"]["status"] == "cancelled"
    again = await gateway.execute(ME, CancelResponse(run.id))
    assert again.status == "cancelled"
    assert again.output == state.output


async def test_cancelling_a_finished_background_response_returns_it_unchanged() -> None:
    store = MemoryStore()
    gateway = gateway_for(ScriptedBackend(script("done")), store)
    run = await create(gateway, background=True)
    await ended(run)
    state = await gateway.execute(ME, CancelResponse(run.id))
    assert state.status == "completed"
    assert state.output[0]["content"][0]["text"] == "done"
    assert store.records[ME.tenant_id, run.id].status == "completed"


async def test_only_background_responses_can_be_cancelled() -> None:
    gate = asyncio.Event()
    store = MemoryStore()
    gateway = gateway_for(ScriptedBackend(script("a"), gate), store)
    running = await create(gateway, stream=True)
    await until_output(running)
    with pytest.raises(InvalidRequest) as caught:
        await gateway.execute(ME, CancelResponse(running.id))
    assert caught.value.message == "Only responses created with background=true can be cancelled."
    assert running.cancel_reason is None
    gate.set()
    await ended(running)
    with pytest.raises(InvalidRequest):
        await gateway.execute(ME, CancelResponse(running.id))
    with pytest.raises(NotFound):
        await gateway.execute(ME, CancelResponse("resp_unknown"))


async def test_a_cancel_read_as_the_run_finishes_here_returns_its_end() -> None:
    """The run ends (and leaves the registry) between the cancel's read of its row,
    still in progress, and its look for the run: not a run of another process (no 409)."""
    gate = asyncio.Event()
    store = MemoryStore()
    gateway = gateway_for(ScriptedBackend(script("done"), gate), store)
    run = await create(gateway, background=True)
    await until_output(run)
    read = store.get

    async def get_then_finish(tenant_id: str, response_id: str) -> ResponseRecord | None:
        record = copy.copy(await read(tenant_id, response_id))  # as a database row is read
        gate.set()
        await ended(run)  # finished here, while this read held the in-progress row
        return record

    store.get = get_then_finish  # type: ignore[method-assign]
    state = await gateway.execute(ME, CancelResponse(run.id))
    assert state.status == "completed"
    assert state.output[0]["content"][0]["text"] == "done"


async def test_a_background_run_of_another_process_cannot_be_cancelled_here() -> None:
    store = MemoryStore()
    body = {"id": "resp_x", "created_at": 1.0, "model": "m", "status": "in_progress"}
    await store.save(
        ResponseRecord("default", "resp_x", None, "in_progress", 1.0, body | {"background": True})
    )
    gateway = gateway_for(ScriptedBackend(script("a")), store)
    with pytest.raises(InvalidRequest) as caught:
        await gateway.execute(ME, CancelResponse("resp_x"))
    assert (caught.value.status, caught.value.code) == (409, "response_running_elsewhere")


async def test_a_stored_watch_follows_a_log_another_process_writes() -> None:
    store = MemoryStore()
    body = {"id": "r", "created_at": 1.0, "model": "m", "status": "in_progress", "background": True}
    await store.save(ResponseRecord("t", "r", None, "in_progress", 1.0, body))
    await store.append_events("t", "r", EventBatch(0, [b"0", b"1"]))
    log = await store.read_events("t", "r", 0)
    assert log is not None
    watch = StoredWatch(store, ("t", "r"), log, 0, poll=0)
    seen: list[tuple[list[bytes], bool]] = []
    first = asyncio.Event()

    async def follow() -> None:
        async for batch in watch.batches():
            seen.append(batch)
            first.set()

    following = asyncio.create_task(follow())
    await first.wait()
    await store.append_events("t", "r", EventBatch(2, [b"2"]))
    final = ResponseRecord("t", "r", None, "completed", 1.0, {**body, "status": "completed"})
    final.events = EventBatch(3, [b"3"])
    await store.finish(final)
    await following

    assert [b for batch, _ in seen for b in batch] == [b"1", b"2", b"3"]
    assert seen[-1][1] is True
    assert watch.behind() == 0


async def test_a_background_run_whose_row_failed_logs_nothing() -> None:
    store = MemoryStore(fail_save=True)
    gateway = gateway_for(ScriptedBackend(script("a")), store)
    run = await create(gateway, background=True)
    await ended(run)
    assert isinstance(run.error, StorageError)
    assert store.events == {}
    assert store.appends == []


@pytest.mark.usefixtures("young_heap")
async def test_a_finished_background_run_is_freed_without_the_collector() -> None:
    with collector_off():
        gateway = gateway_for(ScriptedBackend(script("a", "b")), MemoryStore())
        run = await create(gateway, background=True)
        await ended(run)
        ref = weakref.ref(run)
        del run
        assert await freed(ref)


async def test_settle_returns_once_every_run_has_ended() -> None:
    gate = asyncio.Event()
    gateway = gateway_for(ScriptedBackend(script("a"), gate), MemoryStore())
    run = await create(gateway, background=True)
    settling = asyncio.create_task(gateway.runs.settle())
    await until_output(run)
    assert not settling.done()
    gate.set()
    await settling
    assert gateway.runs.get(run.id) is None
    await gateway.runs.settle()  # nothing in flight: at once


async def test_a_running_response_shows_the_text_written_so_far() -> None:
    """Polling a background run (``GET``) shows its output as it stands: the message
    being written with its text so far, not an empty one; once it ends, the stored one."""
    gate = asyncio.Event()
    backend = ScriptedBackend([TextDelta("Hello"), TextDelta(" there"), Finish("stop")], gate)
    gateway = gateway_for(backend, MemoryStore())
    run = await create(gateway, background=True)
    await until_output(run)
    for _ in range(100):  # both deltas out before the gate
        if len([e for e in run.events if isinstance(e, ev.TextDelta)]) == 2:
            break
        await asyncio.sleep(0)

    polled = await gateway.execute(ME, GetResponse(run.id))

    assert polled.status == "in_progress"
    [message] = polled.output
    assert (message["status"], message["content"][0]["text"]) == ("in_progress", "Hello there")
    assert run.state.output[0]["content"] == []  # the run's own item is not touched
    gate.set()
    await ended(run)
    done = await gateway.execute(ME, GetResponse(run.id))
    assert done.output[0]["content"][0]["text"] == "Hello there"
    assert run.progress is None  # no cycle back to the run once it ended


async def test_closing_the_signalled_cancels_ends_their_deletion_checks() -> None:
    """A cancel signal for a stored foreground run here starts a check of whether its
    response was deleted elsewhere. Closing (shutdown) cancels a check still reading the
    store and waits for it; a signal after that starts none."""
    store = HeldReads()
    gate = asyncio.Event()
    gateway = gateway_for(ScriptedBackend([TextDelta("a")], gate), store)
    run = await create(gateway, stream=True, store=True)
    await until_output(run)
    store.held.add(run.id)
    gateway.cancel_signalled("default", run.id)
    await asyncio.wait_for(store.reading.wait(), 5)

    await gateway.signalled.aclose()
    assert store.abandoned

    store.reading.clear()
    gateway.cancel_signalled("default", run.id)
    for _ in range(5):
        await asyncio.sleep(0)
    assert not store.reading.is_set()
    store.held.clear()
    run.cancel()
    gate.set()
    await ended(run)


class HeldFinish(MemoryStore):
    """A store whose final write of a run (``finish``) waits for ``gate``, then fails:
    a database busy, then away, as the run ends."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.reached = asyncio.Event()

    async def finish(self, record: ResponseRecord) -> bool:
        self.reached.set()
        await self.gate.wait()
        raise StorageError("Storage failed while saving a response.")


async def test_a_poll_while_the_end_is_being_stored_shows_the_run_still_in_progress() -> None:
    """A run's end is not its answer until stored: a ``GET`` polling it meanwhile sees it
    in progress, never ``completed``, since the save may yet fail and the run end failed."""
    store = HeldFinish()
    gateway = gateway_for(ScriptedBackend(script("Hello")), store)
    run = await create(gateway, background=True)
    await asyncio.wait_for(store.reached.wait(), 5)

    polled = await gateway.execute(ME, GetResponse(run.id))

    assert (polled.status, polled.completed_at, polled.error) == ("in_progress", None, None)
    assert polled.output[0]["content"][0]["text"] == "Hello"
    store.gate.set()
    await ended(run)
    assert run.state.status == "failed"
    assert run.state.error is not None
    assert run.state.error["code"] == "storage_unavailable"


async def test_a_watch_tells_the_sequence_number_of_the_next_event_it_gives() -> None:
    """What the error event ending a watcher's stream cut off is numbered with: from past
    ``starting_after`` before any batch, then past each batch given, live or stored."""
    store = MemoryStore()
    gateway = gateway_for(ScriptedBackend(script("a", "b")), store)
    run = await create(gateway, background=True)
    await until_output(run)

    live = await gateway.execute(ME, WatchResponse(run.id, starting_after=0))
    assert isinstance(live, LiveWatch)
    assert live.position == 1
    given = await payloads(live)
    assert live.position == 1 + len(given) == len(run.events)
    await ended(run)
    stored = await gateway.execute(ME, WatchResponse(run.id, starting_after=1))
    assert isinstance(stored, StoredWatch)
    assert stored.position == 2
    given = await payloads(stored)
    assert stored.position == 2 + len(given) == len(run.events)


async def test_a_live_watch_is_behind_by_the_bytes_it_has_not_given_yet() -> None:
    """What a surface drops a watcher by when its client stops reading (``max_lag``)."""
    gateway = gateway_for(ScriptedBackend(script("a", "b")), MemoryStore())
    run = await create(gateway, background=True)
    await ended(run)
    assert run.journal is not None
    wire = run.journal.wire

    live = LiveWatch(run, run.journal, 1)
    assert live.behind() == sum(map(len, wire[2:])) > 0
    assert await payloads(live) == wire[2:]
    assert live.behind() == 0


def settling(store: MemoryStore, backend: ScriptedBackend) -> tuple[Gateway, Settler]:
    """A gateway over ``backend`` whose ends ``store`` fails to save its settler retries
    (at once: pauses of 10-20 ms)."""
    settler = Settler(store, encode_event_json, first_pause=0.01, max_pause=0.02)
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    loop = Loop(store, settler=settler)
    return Gateway(store, router, loop, RunRegistry(), encoder=encode_event_json), settler


async def first_logged(store: MemoryStore, key: tuple[str, str]) -> list[str]:
    """The events of the run ``key`` names once its first are logged."""
    for _ in range(1000):
        if store.events.get(key):
            break
        await asyncio.sleep(0.001)
    return list(store.events[key])


async def test_an_end_whose_save_failed_is_the_answer_until_its_retry_lands() -> None:
    """The run ended here but its end could not be stored: its row stays in progress until
    the settler's retry lands. A retrieve sees the failed end, not a run in progress, and a
    cancel returns it instead of taking it for another process's run (409)."""
    store = MemoryStore(fail_final=True)
    gateway, settler = settling(store, ScriptedBackend(script("x")))
    run = await create(gateway, background=True)
    await ended(run)
    assert store.records[("default", run.id)].status == "in_progress"

    got = await gateway.execute(ME, GetResponse(run.id))
    assert (got.status, got.error and got.error["code"]) == ("failed", "storage_unavailable")
    cancelled = await gateway.execute(ME, CancelResponse(run.id))
    assert cancelled.status == "failed"
    stored = store.events.get(("default", run.id), [])  # logged before the end failed
    watched = await payloads(await gateway.execute(ME, WatchResponse(run.id)))
    assert watched[:-1] == stored
    assert types(watched)[-1] == "response.failed"
    assert orjson.loads(watched[-1])["sequence_number"] == len(stored)
    beyond = WatchResponse(run.id, starting_after=len(stored) + 5)  # seen live, not stored
    assert types(await payloads(await gateway.execute(ME, beyond))) == ["response.failed"]
    other = Principal(tenant_id="other")
    with pytest.raises(NotFound):
        await gateway.execute(other, GetResponse(run.id))

    store.fail_final = False
    await settler.settled()
    assert settler.pending("default", run.id) is None
    assert store.records[("default", run.id)].status == "failed"
    assert (await gateway.execute(ME, GetResponse(run.id))).status == "failed"


async def test_a_watch_of_an_end_whose_save_failed_gives_the_log_then_that_end() -> None:
    """The events logged before the end failed, then the end, numbered as the settler will
    store it: the watcher does not wait for the retry to land."""
    gate = asyncio.Event()
    store = MemoryStore()
    gateway, settler = settling(store, ScriptedBackend(script("a", "b"), gate))
    run = await create(gateway, background=True)
    key = ("default", run.id)
    stored = await first_logged(store, key)
    store.fail_final = True
    store.fail_events = True
    gate.set()
    await ended(run)
    assert store.events[key] == stored
    watched = await payloads(await gateway.execute(ME, WatchResponse(run.id)))
    assert watched[:-1] == stored
    assert types(watched)[-1] == "response.failed"
    assert orjson.loads(watched[-1])["sequence_number"] == len(stored)
    store.fail_final = store.fail_events = False
    await settler.settled()
    assert store.events[key] == watched, "the end stored as it was watched"


@pytest.mark.parametrize("command", [GetResponse, CancelResponse])
async def test_an_end_stored_while_its_row_is_read_is_still_the_answer(
    command: type[GetResponse] | type[CancelResponse],
) -> None:
    """The settler's retry lands (and forgets the end) while a retrieve or cancel holds the
    row it read in progress: the end it looked for first answers."""
    store = MemoryStore(fail_final=True)
    gateway, settler = settling(store, ScriptedBackend(script("x")))
    run = await create(gateway, background=True)
    await ended(run)
    read = store.get

    async def get_then_settle(tenant_id: str, response_id: str) -> ResponseRecord | None:
        record = copy.copy(await read(tenant_id, response_id))  # as a database row is read
        store.get = read  # type: ignore[method-assign]  # the retry's own reads
        store.fail_final = False
        await settler.settled()
        return record

    store.get = get_then_settle  # type: ignore[method-assign]
    state = await gateway.execute(ME, command(run.id))
    assert state.status == "failed"


async def test_a_watch_past_the_stored_log_of_an_end_stored_late_gets_that_end() -> None:
    """Events were sent live that were never stored (the database away), then the end could
    not be saved: once the settler stored it, numbered after the last event stored, a
    watcher past that number (it was sent those events) gets the end, as while the retry
    was pending and as for a run whose process died, not a 400 for a position it was sent;
    so does one from the stored end's own number (it may have been sent another event by
    that number)."""
    gate = asyncio.Event()
    store = MemoryStore()
    gateway, settler = settling(store, ScriptedBackend(script("a", "b", "c"), gate))
    run = await create(gateway, background=True)
    key = ("default", run.id)
    stored = len(await first_logged(store, key))
    store.fail_final = store.fail_events = True
    gate.set()
    await ended(run)
    seen_live = len(run.events) - 2  # the last event before the terminal one
    assert seen_live > stored
    store.fail_final = store.fail_events = False
    await settler.settled()
    assert store.records[key].status == "failed"

    beyond = WatchResponse(run.id, starting_after=seen_live)
    watched = await payloads(await gateway.execute(ME, beyond))
    assert types(watched) == ["response.failed"]
    assert orjson.loads(watched[0])["sequence_number"] == stored
    at_end = WatchResponse(run.id, starting_after=stored)
    assert await payloads(await gateway.execute(ME, at_end)) == watched


def statuses(run: Run) -> list[tuple[str, str]]:
    """The lifecycle events logged so far, each with the status its payload shows."""
    assert run.journal is not None
    logged = run.journal.encoded(0, len(run.events))
    shown = [orjson.loads(p) for p in logged]
    return [(p["type"], p["response"]["status"]) for p in shown if "response" in p]


QUEUED = [("response.created", "queued"), ("response.queued", "queued")]


async def queued(backend: ScriptedBackend) -> tuple[Gateway, Run, MemoryStore, list[str]]:
    """A background run on ``backend``, held before its call is seated (announced), with
    its store and the statuses saved there."""
    backend.seat = asyncio.Event()
    saved: list[str] = []
    store = MemoryStore(on_save=lambda r: saved.append(r.status))
    gateway = gateway_for(backend, store)
    run = await create(gateway, background=True)
    await backend.started.wait()
    await run.announced()
    return gateway, run, store, saved


async def test_a_background_run_is_queued_until_its_first_call_is_seated() -> None:
    backend = ScriptedBackend(script("a"), gate=asyncio.Event())
    gateway, run, store, saved = await queued(backend)

    assert statuses(run) == QUEUED
    assert (await gateway.execute(ME, GetResponse(run.id))).status == "queued"
    assert saved == ["queued"]

    backend.seat.set()
    await until_output(run)
    assert statuses(run) == [*QUEUED, ("response.in_progress", "in_progress")]
    assert (await gateway.execute(ME, GetResponse(run.id))).status == "in_progress"
    backend.gate.set()
    await ended(run)
    assert saved == ["queued", "in_progress", "completed"]
    assert store.records[ME.tenant_id, run.id].status == "completed"


async def test_a_queued_run_is_cancelled_without_ever_starting() -> None:
    gateway, run, _, saved = await queued(ScriptedBackend(script("a")))

    cancelled = await gateway.execute(ME, CancelResponse(run.id))

    assert (cancelled.status, cancelled.output) == ("cancelled", [])
    assert statuses(run) == [*QUEUED, ("response.failed", "cancelled")]
    assert saved == ["queued", "cancelled"]
    replayed = await payloads(await gateway.execute(ME, WatchResponse(run.id)))
    assert replayed == (run.journal.wire if run.journal is not None else None)


async def test_the_row_is_marked_in_progress_once_written_and_before_its_end() -> None:
    """Seated while its queued row is still being written: the update waits for that row,
    and the end waits for the update, so the three writes land in order."""
    backend = ScriptedBackend(script("a", "b"))
    saved: list[str] = []
    store = MemoryStore(on_save=lambda r: saved.append(r.status), save_gate=asyncio.Event())
    gateway = gateway_for(backend, store)
    run = await create(gateway, background=True)
    await backend.started.wait()
    assert run.state.status == "in_progress"  # started: announced so once stored

    assert store.save_gate is not None
    store.save_gate.set()
    await ended(run)

    assert saved == ["queued", "in_progress", "completed"]
    assert statuses(run)[:3] == [*QUEUED, ("response.in_progress", "in_progress")]


async def test_a_queued_run_being_cancelled_reads_queued_until_its_end_is_stored() -> None:
    held, reached = asyncio.Event(), asyncio.Event()

    class HeldEnd(MemoryStore):
        async def finish(self, record: ResponseRecord) -> bool:
            reached.set()
            await held.wait()
            return await super().finish(record)

    backend = ScriptedBackend(script("a"))
    backend.seat = asyncio.Event()
    store = HeldEnd()
    gateway = gateway_for(backend, store)
    run = await create(gateway, background=True)
    await backend.started.wait()
    await run.announced()
    cancelling = asyncio.create_task(gateway.execute(ME, CancelResponse(run.id)))
    await reached.wait()

    assert (await gateway.execute(ME, GetResponse(run.id))).status == "queued"
    held.set()
    assert (await cancelling).status == "cancelled"
