"""Runs are freed by reference counting alone once they end, however they end: a client
that leaves, an upstream that fails, a store that fails. A reference cycle (an exception
kept with its traceback, whose frames hold the run) would keep each run and all it holds
until the garbage collector happens to run, and memory grows with every such run."""

from __future__ import annotations

import asyncio
import weakref

import pytest

from stateway.core import events as ev
from stateway.core.commands import CreateResponse
from stateway.core.errors import GatewayError, StorageError, UpstreamError
from stateway.core.gateway import Gateway
from stateway.core.inference import Delta, Finish, TextDelta
from stateway.core.loop import Loop
from stateway.core.ports import ResponseRecord
from stateway.core.principal import Principal
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.core.runs import Run
from tests.collector import collector_off, freed
from tests.core.fakes import MemoryStore, ScriptedBackend

pytestmark = pytest.mark.usefixtures("young_heap")  # they collect garbage


def user(text: str) -> dict[str, object]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def gateway_for(backend: ScriptedBackend, store: MemoryStore) -> Gateway:
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    return Gateway(store, router, Loop(store), RunRegistry())


async def ended_run(
    script: list[Delta | GatewayError], store: MemoryStore | None = None, *, stream: bool
) -> tuple[weakref.ref[Run], asyncio.Task[None], GatewayError | None]:
    gateway = gateway_for(ScriptedBackend(script), store or MemoryStore())
    run = await gateway.execute(
        Principal(), CreateResponse(model="m", input=[user("hi")], stream=stream)
    )  # type: ignore[arg-type]
    assert run.task is not None
    task = run.task
    await run.wait()
    return weakref.ref(run), task, run.error


async def test_a_cancelled_run_is_freed_without_the_collector() -> None:
    backend = ScriptedBackend([TextDelta("partial")], gate=asyncio.Event())
    gateway = gateway_for(backend, MemoryStore())
    with collector_off():
        run = await gateway.execute(
            Principal(), CreateResponse(model="m", input=[user("hi")], stream=True)
        )  # type: ignore[arg-type]
        task = run.task
        assert task is not None
        for _ in range(1000):
            if any(isinstance(e, ev.TextDelta) for e in run.events):
                break
            await asyncio.sleep(0)
        run.cancel()
        await asyncio.wait([task])  # unlike gather, leaves the task's CancelledError in it
        assert task.cancelled()
        assert run.state.incomplete_reason == "client_disconnected"
        ref = weakref.ref(run)
        del run, task
        assert await freed(ref)


async def test_a_run_failed_before_any_output_is_freed_without_the_collector() -> None:
    with collector_off():
        ref, task, error = await ended_run([UpstreamError("boom")], stream=False)
        await asyncio.wait([task])
        assert isinstance(error, UpstreamError)
        del task, error
        assert await freed(ref)


async def test_a_run_failed_mid_stream_is_freed_without_the_collector() -> None:
    with collector_off():
        ref, task, _ = await ended_run([TextDelta("a"), UpstreamError("boom")], stream=True)
        await asyncio.wait([task])
        del task
        assert await freed(ref)


async def test_a_run_whose_save_failed_is_freed_without_the_collector() -> None:
    def fail(record: ResponseRecord) -> None:
        raise StorageError("disk full")

    with collector_off():
        ref, task, error = await ended_run(
            [Finish("stop")], MemoryStore(on_save=fail), stream=False
        )
        await asyncio.wait([task])
        assert isinstance(error, StorageError)
        del task, error
        assert await freed(ref)


class WaitingStore(MemoryStore):
    """Settles each save through a future, as the SQL store's group commit does: a future
    keeps its exception, whose traceback holds the frame awaiting it."""

    async def save(self, record: ResponseRecord) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_exception(StorageError("disk full"))
        await done


async def test_a_run_with_output_whose_save_failed_is_freed_without_the_collector() -> None:
    with collector_off():
        ref, task, _ = await ended_run(
            [TextDelta("a"), Finish("stop")], WaitingStore(), stream=True
        )
        await asyncio.wait([task])
        del task
        assert await freed(ref)


async def test_a_completed_run_is_freed_without_the_collector() -> None:
    with collector_off():
        ref, task, _ = await ended_run([TextDelta("ok"), Finish("stop")], stream=True)
        await asyncio.wait([task])
        del task
        assert await freed(ref)
