"""Whoever holds a response's id may watch it: a client told ``response.created`` finds the
response stored, and a log that is being stored is waited for, not refused (nor left
waiting when it never will be). The store's writes are held where each window was open."""

from __future__ import annotations

import asyncio

import orjson

from stateway.core import events as ev
from stateway.core.commands import CreateResponse, GetResponse, WatchResponse
from stateway.core.gateway import Gateway
from stateway.core.ports import ResponseRecord, StoredChain
from stateway.core.runs import Run
from tests.core.fakes import MemoryStore, ScriptedBackend
from tests.core.test_background import (
    ME,
    ended,
    gateway_for,
    payloads,
    script,
    settling,
    types,
    user,
)


async def yielded() -> None:
    """Let every task that is ready run as far as it goes without waiting on anything."""
    for _ in range(10):
        await asyncio.sleep(0)


async def test_a_log_kept_after_its_run_ended_is_resumed_once_stored_not_refused() -> None:
    """WebSocket mode stores a create's log only when its connection closes before the
    lane sent it all; when the run has ended by then, the whole log is written after the
    final save. A client reconnecting to resume meanwhile found the run gone from the
    registry and the stored response ended with no log: "no event log to resume"."""
    store = MemoryStore()
    gateway = gateway_for(ScriptedBackend(script("a", "b")), store)
    command = CreateResponse(model="m", input=[user("hi")], stream=True, journaled=True)
    run = await gateway.execute(ME, command)  # as a socket's response.create
    await ended(run)
    assert gateway.runs.get(run.id) is None
    assert run.journal is not None
    store.events_gate = asyncio.Event()  # the late write is held
    run.journal.keep()  # the connection closed before the last frames went out

    resume = WatchResponse(run.id, 0, replay=True, refuse_at_end=True)
    watching = asyncio.create_task(gateway.execute(ME, resume))
    await yielded()
    assert not watching.done()  # waits for the log, rather than refusing it
    store.events_gate.set()

    resumed = await payloads(await watching)
    assert resumed == run.journal.wire[1:]
    assert types(resumed)[-1] == "response.completed"


async def test_the_drain_waits_for_a_log_kept_after_its_run_ended() -> None:
    """Its client resumes it after the restart, maybe on another process: the log must
    be in the store before the store is closed."""
    store = MemoryStore()
    gateway = gateway_for(ScriptedBackend(script("a")), store)
    command = CreateResponse(model="m", input=[user("hi")], stream=True, journaled=True)
    run = await gateway.execute(ME, command)
    await ended(run)
    assert run.journal is not None
    store.events_gate = asyncio.Event()
    run.journal.keep()

    settling = asyncio.create_task(gateway.runs.settle())
    await yielded()
    assert not settling.done()
    store.events_gate.set()
    await settling
    assert store.events["default", run.id] == run.journal.wire


async def test_a_log_kept_while_its_end_fails_to_be_saved_is_not_waited_for() -> None:
    """Kept while the final save was under way, the log is stored with the terminal event
    that save was to store; that save failed (the settler stores the end later), so no
    late write comes, and a resume is answered (with the end the settler will store)
    rather than left waiting for it."""

    class FailingEnd(MemoryStore):
        async def finish(self, record: ResponseRecord) -> bool:
            assert run.journal is not None
            run.journal.keep()  # its connection closed as the end was being saved
            return await super().finish(record)

    store = FailingEnd(fail_final=True)
    gateway, settler = settling(store, ScriptedBackend(script("a")))
    command = CreateResponse(model="m", input=[user("hi")], stream=True, journaled=True)
    run = await gateway.execute(ME, command)
    await ended(run)

    resume = WatchResponse(run.id, 0, replay=True, refuse_at_end=True)
    watching = asyncio.create_task(gateway.execute(ME, resume))
    await yielded()
    assert watching.done()
    assert types(await payloads(watching.result())) == ["response.failed"]
    assert store.appends == []
    store.fail_final = False
    await settler.settled()


async def test_a_run_ended_by_the_shutdown_before_it_began_is_stored_before_it_is_announced() -> (
    None
):
    """A background run registered as the drain window closed (``end_all`` ran while it was
    admitted) ends as soon as it starts. It was announced before any row of it was
    written: its client got its id (a 200 ``in_progress``) while a retrieve, a watch or
    a cancel of it found nothing, and the row written then held no event log, so its
    stream could not be resumed. It is announced once its row is stored, like any run."""
    gate = asyncio.Event()

    class ClosingStore(MemoryStore):
        async def load_context(self, tenant_id: str, response_id: str) -> StoredChain | None:
            gateway.runs.closing = True  # end_all ran while the context was being read
            return await super().load_context(tenant_id, response_id)

    store = ClosingStore()
    await store.save(ResponseRecord("default", "resp_0", None, "completed", 0.0, {}, [], []))
    store.save_gate = gate  # every write of the run held
    backend = ScriptedBackend(script("a"))
    gateway = gateway_for(backend, store)
    command = CreateResponse(
        model="m", input=[user("hi")], previous_response_id="resp_0", background=True
    )
    run = await gateway.execute(ME, command)

    first_watch = asyncio.create_task(watched_once_announced(gateway, run))
    await yielded()
    assert run.events == []  # nothing announced while no row is written
    assert not first_watch.done()
    gate.set()
    await ended(run)

    assert backend.requests == []
    assert [type(e) for e in run.events] == [  # ended before it started: from queued
        ev.ResponseCreated,
        ev.ResponseQueued,
        ev.ResponseFinished,
    ]
    told = orjson.loads(await first_watch)  # watched as soon as its id was known
    stored = await gateway.execute(ME, GetResponse(run.id))
    assert told["type"] == "response.failed"
    assert (stored.status, told["response"]["status"]) == ("failed", "failed")
    assert stored.error is not None
    assert stored.error["code"] == told["response"]["error"]["code"] == "server_shutting_down"
    replayed = await payloads(await gateway.execute(ME, WatchResponse(run.id)))
    assert types(replayed) == ["response.created", "response.queued", "response.failed"]
    assert replayed[-1] == orjson.dumps(told)


async def watched_once_announced(gateway: Gateway, run: Run) -> bytes:
    """The last payload of a watch (``GET ?stream=true``) started as soon as ``run`` is
    announced, as its client would start one on reading its id."""
    await run.announced()
    log = await payloads(await gateway.execute(ME, WatchResponse(run.id)))
    return log[-1]
