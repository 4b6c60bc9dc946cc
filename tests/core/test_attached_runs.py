"""Attached runs (``CreateResponse.attach``): a non-streamed run driven by its caller's
task. ``execute`` returns once the run has ended; a cancel asked through ``Run.cancel``
ends the run as it would a run in a task of its own and is absorbed, any other cancel of
the caller goes on; the final save is never interrupted."""

import asyncio

import pytest

from stateway.core.commands import CreateResponse
from stateway.core.errors import ServerShuttingDown
from stateway.core.gateway import Gateway
from stateway.core.inference import Finish, TextDelta
from stateway.core.principal import Principal
from stateway.core.runs import CancelReason, Run
from tests.core.fakes import MemoryStore, ScriptedBackend
from tests.core.test_background import gateway_for as background_gateway
from tests.core.test_loop import gateway_for, user


class Attached:
    """An ``attach`` that records the run and the task it was attached in."""

    def __init__(self) -> None:
        self.runs: list[Run] = []
        self.tasks: list[asyncio.Task[object] | None] = []

    def __call__(self, run: Run) -> None:
        self.runs.append(run)
        self.tasks.append(run.task)


def create(attach: Attached, **fields: object) -> CreateResponse:
    return CreateResponse(model="m", input=[user("hi")], attach=attach, **fields)  # type: ignore[arg-type]


def settled(gateway: Gateway) -> bool:
    """No run in flight, and the config generation's lease given back."""
    return len(gateway.runs) == 0 and gateway.generations.current.leases == 0


async def generating() -> tuple[ScriptedBackend, MemoryStore, Gateway, Attached, asyncio.Task[Run]]:
    """An attached run that has started generating and waits on its backend's gate,
    driven by its caller: the task returned."""
    backend = ScriptedBackend([TextDelta("partial")], gate=asyncio.Event())
    store = MemoryStore()
    gateway = gateway_for(backend, store)
    attach = Attached()
    execute = asyncio.create_task(gateway.execute(Principal(), create(attach)))
    await backend.started.wait()
    return backend, store, gateway, attach, execute


async def test_an_attached_run_is_driven_by_its_caller_and_over_when_execute_returns() -> None:
    store = MemoryStore()
    gateway = gateway_for(ScriptedBackend([TextDelta("hello"), Finish("stop")]), store)
    attach = Attached()

    run = await gateway.execute(Principal(), create(attach))

    assert attach.runs == [run]
    assert attach.tasks == [asyncio.current_task()]  # no task of its own
    assert run.closed
    assert run.state.status == "completed"
    assert store.records["default", run.id].status == "completed"
    assert run.task is None
    assert run.driver is None
    assert settled(gateway)


async def test_a_background_run_is_detached_whatever_attach_says() -> None:
    gate = asyncio.Event()
    backend = ScriptedBackend([TextDelta("x"), Finish("stop")], gate=gate)
    gateway = background_gateway(backend, MemoryStore())
    attach = Attached()

    run = await gateway.execute(Principal(), create(attach, background=True))

    assert attach.runs == []
    assert not run.closed  # still running, in its own task
    assert run.task is not None
    assert run.task is not asyncio.current_task()
    gate.set()
    await run.wait()
    assert run.state.status == "completed"


@pytest.mark.parametrize(
    ("reason", "status"),
    [(CancelReason.CLIENT_GONE, "incomplete"), (CancelReason.CANCELLED, "cancelled")],
)
async def test_a_cancel_asked_through_the_run_ends_it_and_execute_returns(
    reason: CancelReason, status: str
) -> None:
    backend, store, gateway, attach, execute = await generating()

    attach.runs[0].cancel(reason)
    run = await execute

    assert backend.closed.is_set()  # the upstream call was cancelled, not finished
    assert backend.gate is not None
    assert not backend.gate.is_set()
    assert run.state.status == status
    assert store.records["default", run.id].status == status
    assert execute.cancelling() == 0  # absorbed: the caller goes on to answer
    assert settled(gateway)


async def test_shutting_down_ends_an_attached_run_with_its_error() -> None:
    _backend, _store, gateway, _attach, execute = await generating()

    await gateway.runs.end_all(CancelReason.SHUTTING_DOWN)
    run = await execute

    assert isinstance(run.error, ServerShuttingDown)
    assert run.state.status == "failed"
    assert settled(gateway)


async def test_any_other_cancel_of_the_caller_ends_the_run_and_goes_on() -> None:
    _backend, store, gateway, attach, execute = await generating()

    execute.cancel()
    with pytest.raises(asyncio.CancelledError):
        await execute

    [run] = attach.runs
    assert run.closed
    assert store.records["default", run.id].status == "incomplete"
    assert settled(gateway)


async def test_a_cancel_of_the_caller_beside_the_runs_own_goes_on() -> None:
    _backend, _store, gateway, attach, execute = await generating()

    attach.runs[0].cancel(CancelReason.CANCELLED)  # the run's own cancel...
    execute.cancel()  # ...and, in the same turn, its caller's
    with pytest.raises(asyncio.CancelledError):
        await execute

    assert attach.runs[0].state.status == "cancelled"
    assert settled(gateway)


async def test_a_cancel_during_the_final_save_changes_nothing() -> None:
    gate, saving = asyncio.Event(), asyncio.Event()
    store = MemoryStore(lambda record: saving.set(), save_gate=gate)
    gateway = gateway_for(ScriptedBackend([TextDelta("done"), Finish("stop")]), store)
    attach = Attached()
    execute = asyncio.create_task(gateway.execute(Principal(), create(attach)))
    await saving.wait()

    attach.runs[0].cancel()  # the client left while the response was being stored
    gate.set()
    run = await execute

    assert run.state.status == "completed"
    assert store.records["default", run.id].status == "completed"
    assert settled(gateway)


async def test_a_run_cancelled_before_it_begins_ends_at_once() -> None:
    backend = ScriptedBackend([TextDelta("x"), Finish("stop")])
    gateway = gateway_for(backend, MemoryStore())

    run = await gateway.execute(
        Principal(),
        create(lambda run: run.cancel(CancelReason.CLIENT_GONE)),  # type: ignore[arg-type]
    )

    assert run.state.status == "incomplete"
    assert backend.requests == []
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    assert settled(gateway)


async def test_an_attach_that_fails_leaves_nothing_registered() -> None:
    gateway = gateway_for(ScriptedBackend([TextDelta("x"), Finish("stop")]), MemoryStore())

    def failing(run: Run) -> None:
        raise RuntimeError("attach failed")

    with pytest.raises(RuntimeError):
        await gateway.execute(Principal(), create(failing))  # type: ignore[arg-type]
    assert settled(gateway)


async def test_an_outside_cancel_of_a_run_cancelled_before_it_began_goes_on() -> None:
    """The run's own cancel never interrupted the task: a cancel of the task while the
    run is stored is someone else's, and is not taken back."""
    gate, saving = asyncio.Event(), asyncio.Event()
    store = MemoryStore(lambda record: saving.set(), save_gate=gate)
    gateway = gateway_for(ScriptedBackend([TextDelta("x"), Finish("stop")]), store)
    execute = asyncio.create_task(
        gateway.execute(Principal(), create(lambda run: run.cancel(CancelReason.CLIENT_GONE)))  # type: ignore[arg-type]
    )
    await saving.wait()

    execute.cancel()
    with pytest.raises(asyncio.CancelledError):
        await execute
    assert settled(gateway)
