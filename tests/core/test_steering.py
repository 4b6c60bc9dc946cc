"""A run steered or interrupted through ``Gateway.execute`` (WebSocket mode's
``response.steer`` and ``response.interrupt``): only a run this process runs for the
principal's tenant is reached; another tenant's is left as it is."""

from __future__ import annotations

from stateway.core import events as ev
from stateway.core.commands import CreateResponse, InterruptResponse, SteerResponse
from stateway.core.gateway import Gateway
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.response import ResponseState
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.core.runs import CancelReason, Run
from tests.core.fakes import MemoryStore, ScriptedBackend

OWNER = Principal("acme")
OTHER = Principal("globex")
NOTICE = ev.Notice("response.steer.accepted", {"steer": {"id": "steer_1"}})


def gateway() -> Gateway:
    store = MemoryStore()
    router = Router([BackendEntry(ScriptedBackend([]), {}, catch_all=True)])
    return Gateway(store, router, Loop(store), RunRegistry())


def running(gateway: Gateway, response_id: str = "resp_1") -> Run:
    """A run of ``OWNER``'s that this process runs, announced."""
    request = CreateResponse(model="m", input=[])
    state = ResponseState.start(response_id, OWNER.tenant_id, 0.0, request)
    run = Run(state, [])
    run.emit(ev.ResponseCreated(state))
    gateway.runs.add(run)
    return run


async def test_a_steer_logs_its_notice_and_stops_the_run_of_its_tenant_only() -> None:
    core = gateway()
    run = running(core)
    noted = await core.execute(OTHER, SteerResponse(run.id, NOTICE, stop=True))
    assert not noted.logged
    assert (run.events[1:], run.steered) == ([], False)

    noted = await core.execute(OWNER, SteerResponse(run.id, NOTICE))
    assert noted.logged
    assert run.events[1:] == [NOTICE]
    assert not run.steered  # a notice alone (a refusal) leaves it going
    await core.execute(OWNER, SteerResponse(run.id, NOTICE, stop=True))
    assert run.steered


async def test_a_steer_of_a_run_finishing_ended_or_elsewhere_is_not_logged() -> None:
    core = gateway()
    run = running(core)
    run.finishing = True
    noted = await core.execute(OWNER, SteerResponse(run.id, NOTICE, stop=True))
    assert not noted.logged
    assert run.steered  # it stops at its boundary, if it is yet to reach one
    noted = await core.execute(OWNER, SteerResponse("resp_elsewhere", NOTICE, stop=True))
    assert not noted.logged

    ended = running(core, "resp_2")
    ended.close()  # still registered: its task is ending
    noted = await core.execute(OWNER, SteerResponse(ended.id, NOTICE, stop=True))
    assert (noted.logged, ended.steered) == (False, False)


async def test_an_interrupt_stops_the_run_of_its_tenant_only() -> None:
    core = gateway()
    run = running(core)
    await core.execute(OTHER, InterruptResponse(run.id))
    assert run.cancel_reason is None
    await core.execute(OWNER, InterruptResponse("resp_elsewhere"))
    assert run.cancel_reason is None
    await core.execute(OWNER, InterruptResponse(run.id))
    assert run.cancel_reason is CancelReason.INTERRUPTED
