"""How a run ends when it is interrupted or cannot be stored: the reason decides the
stored status and what each kind of client is told."""

import asyncio

import pytest

from stateway.core import events as ev
from stateway.core.commands import CreateResponse, DeleteResponse, GetResponse, ListInputItems
from stateway.core.errors import (
    InternalError,
    NotFound,
    ResponseInProgress,
    ServerRestarted,
    ServerShuttingDown,
    StorageError,
    StorageFull,
    UpstreamError,
)
from stateway.core.gateway import Gateway
from stateway.core.inference import Delta, Finish, ReasoningDelta, TextDelta, ToolCallDelta
from stateway.core.ownership import fail_owned
from stateway.core.ports import ResponseRecord, StoredChain
from stateway.core.principal import Principal
from stateway.core.response import INTERRUPTED_REASON
from stateway.core.runs import CancelReason, Run
from stateway.protocols.responses.encode import encode_response
from stateway.protocols.responses.event_log import decode_event_json
from stateway.protocols.responses.stream import encode_event_json
from tests.core.fakes import MemoryStore, ScriptedBackend
from tests.core.test_loop import gateway_for, user


async def started(gateway: Gateway, backend: ScriptedBackend, *, stream: bool = True) -> Run:
    """A run that has produced output and waits on its backend's gate."""
    run = await gateway.execute(
        Principal(), CreateResponse(model="m", input=[user("hi")], stream=stream)
    )
    async for _, event in run.subscribe():
        if isinstance(event, ev.TextDelta):
            break
    return run


def generating() -> tuple[ScriptedBackend, MemoryStore, Gateway]:
    backend = ScriptedBackend([TextDelta("partial")], gate=asyncio.Event())
    store = MemoryStore()
    return backend, store, gateway_for(backend, store)


async def test_the_in_progress_row_holds_the_input_before_response_created() -> None:
    backend, store, gateway = generating()
    run = await started(gateway, backend)
    [record] = store.records.values()
    assert record.status == "in_progress"
    assert record.input_items == [user("hi")]
    assert record.owner is not None
    page = await gateway.execute(Principal(), ListInputItems(run.id))
    assert page.items == [user("hi")]
    run.cancel()
    await run.wait()


@pytest.mark.parametrize("stream", [False, True])
async def test_a_final_save_that_fails_reports_no_completion_and_tells_every_client(
    stream: bool,
) -> None:
    store = MemoryStore(fail_final=True)
    gateway = gateway_for(ScriptedBackend([TextDelta("x"), Finish("stop")]), store)
    run = await gateway.execute(
        Principal(), CreateResponse(model="m", input=[user("hi")], stream=stream)
    )
    await run.wait()

    assert isinstance(run.error, StorageError)  # non-stream callers answer 503
    assert run.error.status == 503
    assert run.state.status == "failed"
    assert run.state.completed_at is None
    last = run.events[-1]  # what a stream client sees last
    assert isinstance(last, ev.ResponseFinished)
    body = encode_response(last.response)
    assert body["status"] == "failed"
    assert body["completed_at"] is None
    message = "The response could not be stored."
    assert run.state.error == {"code": "storage_unavailable", "message": message, "status": 503}
    assert run.error.message == message


class FullStore(MemoryStore):
    """Its write of a run's end is refused: the database is out of space."""

    async def save(self, record: ResponseRecord) -> None:
        if record.status != "in_progress":
            raise StorageFull("Storage failed while saving a response.")
        await super().save(record)

    async def finish(self, record: ResponseRecord) -> bool:
        raise StorageFull("Storage failed while saving a response.")


@pytest.mark.parametrize("stream", [False, True])
async def test_a_final_save_the_database_refused_tells_every_client_why(stream: bool) -> None:
    gateway = gateway_for(ScriptedBackend([TextDelta("x"), Finish("stop")]), FullStore())
    run = await gateway.execute(
        Principal(), CreateResponse(model="m", input=[user("hi")], stream=stream)
    )
    await run.wait()

    message = (
        "The response could not be stored. The database is out of space (its disk is full,"
        " or it reached its size limit)."
    )
    assert isinstance(run.error, StorageFull)  # non-stream callers: 503 storage_full
    assert (run.error.status, run.error.code, run.error.message) == (503, "storage_full", message)
    assert run.state.error == {"code": "storage_full", "message": message, "status": 503}
    last = run.events[-1]  # what a stream client sees last
    assert isinstance(last, ev.ResponseFinished)
    assert encode_response(last.response)["error"]["message"] == message


class CrashingStore(MemoryStore):
    """Its write of a run's end fails with a bug, not a :class:`StorageError`."""

    async def save(self, record: ResponseRecord) -> None:
        if record.status != "in_progress":
            raise RuntimeError("a bug in the store")
        await super().save(record)

    async def finish(self, record: ResponseRecord) -> bool:
        raise RuntimeError("a bug in the store")


@pytest.mark.parametrize("stream", [False, True])
async def test_a_run_that_crashes_while_finishing_ends_failed_with_an_internal_error(
    stream: bool,
) -> None:
    backend = ScriptedBackend([TextDelta("x"), Finish("stop")])
    gateway = gateway_for(backend, CrashingStore())
    run = await gateway.execute(
        Principal(), CreateResponse(model="m", input=[user("hi")], stream=stream)
    )
    await run.wait()

    assert isinstance(run.error, InternalError)  # what a non-stream caller is answered
    assert (run.error.status, run.error.code) == (500, "internal_error")
    assert run.state.status == "failed"
    assert run.state.error is not None
    assert (run.state.error["code"], run.state.error["status"]) == ("internal_error", 500)
    [finished] = [e for e in run.events if isinstance(e, ev.ResponseFinished)]
    assert finished is run.events[-1]  # what a stream client sees last
    body = encode_response(finished.response)
    assert body["status"] == "failed"
    assert body["error"]["code"] == "server_error"  # the wire folds 5xx codes
    assert run.closed
    assert gateway.runs.get(run.id) is None


async def test_a_run_that_crashes_while_finishing_keeps_the_error_it_failed_with() -> None:
    backend = ScriptedBackend([UpstreamError("refused")])
    gateway = gateway_for(backend, CrashingStore())
    run = await gateway.execute(Principal(), CreateResponse(model="m", input=[user("hi")]))
    await run.wait()

    assert isinstance(run.error, UpstreamError)  # the caller is told why it failed
    assert (run.error.status, run.error.code) == (502, "upstream_error")
    assert run.state.status == "failed"
    assert run.state.error is not None
    assert run.state.error["code"] == "internal_error"
    assert isinstance(run.events[-1], ev.ResponseFinished)


async def test_shutting_down_ends_a_run_failed_with_its_own_code() -> None:
    backend, store, gateway = generating()
    run = await started(gateway, backend, stream=False)
    await gateway.runs.end_all(CancelReason.SHUTTING_DOWN)

    assert isinstance(run.error, ServerShuttingDown)
    assert run.error.status == 503
    assert run.state.status == "failed"
    assert encode_response(run.state)["error"]["code"] == "server_shutting_down"
    assert next(iter(store.records.values())).status == "failed"
    with pytest.raises(ServerShuttingDown):  # and nothing new starts
        await gateway.execute(Principal(), CreateResponse(model="m", input=[user("hi")]))


async def test_a_run_that_starts_while_the_server_closes_ends_before_calling_upstream() -> None:
    backend = ScriptedBackend([TextDelta("x"), Finish("stop")])

    class ClosingStore(MemoryStore):
        async def load_context(self, tenant_id: str, response_id: str) -> StoredChain | None:
            gateway.runs.closing = True  # end_all ran while the context was being read
            return await super().load_context(tenant_id, response_id)

    store = ClosingStore()
    await store.save(ResponseRecord("default", "resp_0", None, "completed", 0.0, {}, [], []))
    gateway = gateway_for(backend, store)
    run = await gateway.execute(
        Principal(), CreateResponse(model="m", input=[user("hi")], previous_response_id="resp_0")
    )
    await run.wait()

    assert isinstance(run.error, ServerShuttingDown)
    assert run.state.status == "failed"
    assert backend.requests == []
    assert store.records["default", run.id].status == "failed"


@pytest.mark.parametrize(
    "script",
    [
        [TextDelta("x"), Finish("stop")],
        # a call that takes no arguments, and no finish reason: its opening, held, is
        # the output at the stream's end
        [ToolCallDelta(0, "call_1", "now", "")],
    ],
)
async def test_response_created_waits_for_the_row_while_the_upstream_call_starts(
    script: list[Delta],
) -> None:
    gate = asyncio.Event()
    backend = ScriptedBackend(script)
    store = MemoryStore(save_gate=gate)
    gateway = gateway_for(backend, store)
    run = await gateway.execute(
        Principal(), CreateResponse(model="m", input=[user("hi")], stream=True)
    )

    await backend.started.wait()  # upstream already asked...
    for _ in range(10):  # (and answered, as far as it goes)
        await asyncio.sleep(0)
    assert run.events == []  # ...but nothing announced while the row is not written
    gate.set()
    await run.wait()
    assert isinstance(run.events[0], ev.ResponseCreated)
    assert run.state.status == "completed"


async def test_a_row_that_cannot_be_written_is_never_announced() -> None:
    backend = ScriptedBackend([TextDelta("x"), Finish("stop")])
    gateway = gateway_for(backend, MemoryStore(fail_save=True))
    run = await gateway.execute(
        Principal(), CreateResponse(model="m", input=[user("hi")], stream=True)
    )
    await run.wait()

    assert isinstance(run.error, StorageError)
    assert run.state.status == "failed"
    assert [type(e) for e in run.events] == [ev.ResponseFinished]
    assert backend.closed.is_set()


async def test_deleting_a_running_response_cancels_it_and_it_stays_deleted() -> None:
    backend, _store, gateway = generating()
    run = await started(gateway, backend)

    deleted = await gateway.execute(Principal(), DeleteResponse(run.id))
    await run.wait()
    await backend.closed.wait()

    assert deleted.id == run.id
    last = run.events[-1]
    assert isinstance(last, ev.ResponseFinished)
    assert last.response.status == "cancelled"  # as its client asked: not a failure
    assert last.response.error is None
    assert run.error is None
    with pytest.raises(NotFound):
        await gateway.execute(Principal(), GetResponse(run.id))


async def test_continuing_from_a_running_response_is_refused() -> None:
    backend, _store, gateway = generating()
    run = await started(gateway, backend)
    with pytest.raises(ResponseInProgress) as caught:
        await gateway.execute(
            Principal(), CreateResponse(model="m", input=[user("b")], previous_response_id=run.id)
        )
    assert caught.value.status == 400
    assert caught.value.code == "response_in_progress"
    run.cancel()
    await run.wait()


async def test_a_failed_response_lends_its_input_but_not_its_cut_off_output() -> None:
    store = MemoryStore()
    backend = ScriptedBackend([TextDelta("cut off"), StorageError("boom")])
    gateway = gateway_for(backend, store)
    first = await gateway.execute(Principal(), CreateResponse(model="m", input=[user("a")]))
    await first.wait()
    assert first.state.status == "failed"

    backend.script = [TextDelta("ok"), Finish("stop")]
    second = await gateway.execute(
        Principal(), CreateResponse(model="m", input=[user("b")], previous_response_id=first.id)
    )
    await second.wait()
    sent = backend.requests[-1].items
    assert [i["content"][0]["text"] for i in sent] == ["a", "b"]


async def test_an_interrupted_run_keeps_what_it_completed_and_drops_what_it_was_writing() -> None:
    """Its client interrupted it (WebSocket ``response.interrupt``): it ends incomplete,
    ``interrupted``, a turn a later request continues, with only the items it had
    completed; the message it was writing is dropped, as it was never done."""
    backend = ScriptedBackend([ReasoningDelta("think"), TextDelta("partial")], asyncio.Event())
    store = MemoryStore()
    run = await started(gateway_for(backend, store), backend)
    run.cancel(CancelReason.INTERRUPTED)
    await run.wait()

    state = run.state
    assert (state.status, state.incomplete_reason) == ("incomplete", INTERRUPTED_REASON)
    assert [(i["type"], i["status"]) for i in state.output] == [("reasoning", "completed")]
    record = store.records["default", run.id]
    assert (record.status, record.output_items) == ("incomplete", state.output)
    assert isinstance(run.events[-1], ev.ResponseFinished)


async def test_an_error_kept_on_the_run_holds_no_frames_of_it_or_its_cause() -> None:
    """The error outlives the frames it went through (the caller reads it later): kept
    with its tracebacks, their locals (the run, upstream streams) would stay alive."""
    try:
        raise OSError("connection reset")
    except OSError as caught:
        cause = caught
    assert cause.__traceback__ is not None
    error = UpstreamError("the upstream failed")
    error.__cause__ = cause  # raised from it, outside its handler: no __context__
    run = await gateway_for(ScriptedBackend([error]), MemoryStore()).execute(
        Principal(), CreateResponse(model="m", input=[user("hi")])
    )
    await run.wait()

    assert run.error is error
    assert error.__traceback__ is None
    assert cause.__traceback__ is None


async def test_a_notice_is_not_logged_while_the_run_is_finishing() -> None:
    """Once its end is being written, the events that end stores are set: a notice
    (WebSocket steering's) is refused, for its surface to send after the terminal event."""
    gate, ending = asyncio.Event(), asyncio.Event()
    store = MemoryStore(on_save=lambda r: ending.set(), save_gate=gate)
    gateway = gateway_for(ScriptedBackend([TextDelta("x"), Finish("stop")]), store)
    run = await gateway.execute(Principal(), CreateResponse(model="m", input=[user("hi")]))
    await ending.wait()  # a non-stream run: written once, at its end
    assert not run.note(ev.Notice("response.steer.accepted", {}))
    gate.set()
    await run.wait()
    assert not [e for e in run.events if isinstance(e, ev.Notice)]


async def test_a_run_ending_after_another_process_failed_it_ends_as_stored() -> None:
    """A paused process's lease lapsed and another process failed its run's row
    (``server_restarted``); the run, a stream not journaled, ends before this process's
    next beat could tell it. Its late end writes nothing into the failed row, and its
    client is told the stored end, not ``completed``."""
    backend, store, gateway = generating()
    run = await started(gateway, backend)
    [record] = store.records.values()
    await fail_owned(store, record, encode_event_json, decode_event_json)  # judged elsewhere
    backend.gate.set()
    await run.wait()

    stored = await store.get(record.tenant_id, run.id)
    assert stored is not None
    assert (stored.status, stored.output_items) == ("failed", [])
    assert isinstance(run.error, ServerRestarted)  # non-stream callers: 503 server_restarted
    assert run.state.status == "failed"
    assert run.state.completed_at is None
    last = run.events[-1]  # what a stream client sees last
    assert isinstance(last, ev.ResponseFinished)
    body = encode_response(last.response)
    assert (body["status"], body["error"]["code"]) == ("failed", "server_restarted")
    assert body["output"] == []  # as stored: its output was never kept
    answer = await gateway.execute(Principal(), GetResponse(run.id))
    assert encode_response(answer) == body
