"""Non-streamed answers drive their run in the request's own task (attached runs): a
client that leaves while the model generates cancels the run and its upstream call, on
every frontend; one that leaves while the response is being stored interrupts nothing."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from starlette.applications import Starlette

from stateway.core.gateway import Gateway
from stateway.core.inference import Finish, TextDelta
from stateway.core.loop import Loop
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.surfaces.http.app import build_http_app
from stateway.surfaces.http.chat import ChatRoutes
from stateway.surfaces.http.messages import MessagesRoutes
from stateway.surfaces.http.responses import ResponsesRoutes
from stateway.surfaces.http.service import ServiceRoutes
from stateway.surfaces.http.transport import WATCH_AFTER
from tests.core.fakes import MemoryStore, ScriptedBackend
from tests.surfaces.http.asgi import call

REQUESTS = {
    "responses": ("/v1/responses", {"model": "m", "input": "hi"}),
    "messages": (
        "/v1/messages",
        {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]},
    ),
    "chat": (
        "/v1/chat/completions",
        {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    ),
}


def build(backend: ScriptedBackend, store: MemoryStore) -> tuple[Starlette, Gateway]:
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    gateway = Gateway(store, router, Loop(store), RunRegistry())
    app = build_http_app(
        ResponsesRoutes(gateway, 1 << 20),
        ServiceRoutes(gateway),
        messages=MessagesRoutes(gateway, 1 << 20),
        chat=ChatRoutes(gateway, 1 << 20),
    )
    return app, gateway


@pytest.mark.parametrize("frontend", sorted(REQUESTS))
async def test_a_client_leaving_while_the_model_generates_cancels_the_upstream_call(
    frontend: str,
) -> None:
    backend = ScriptedBackend([TextDelta("partial")], gate=asyncio.Event())
    app, gateway = build(backend, MemoryStore())
    path, body = REQUESTS[frontend]
    leave = asyncio.Event()
    answered = asyncio.ensure_future(call(app, "POST", path, orjson.dumps(body), leave=leave))
    await backend.started.wait()

    leave.set()
    reply = await asyncio.wait_for(answered, 10)

    assert backend.closed.is_set()  # the upstream call was cancelled, not finished
    assert backend.gate is not None
    assert not backend.gate.is_set()
    assert reply.status == 0  # nobody left to answer
    assert len(gateway.runs) == 0
    assert gateway.generations.current.leases == 0


async def test_a_client_leaving_while_its_response_is_stored_interrupts_nothing() -> None:
    gate, saving = asyncio.Event(), asyncio.Event()
    store = MemoryStore(lambda record: saving.set(), save_gate=gate)
    app, gateway = build(ScriptedBackend([TextDelta("done"), Finish("stop")]), store)
    leave = asyncio.Event()
    path, body = REQUESTS["responses"]
    answered = asyncio.ensure_future(call(app, "POST", path, orjson.dumps(body), leave=leave))
    await saving.wait()

    leave.set()
    await asyncio.sleep(WATCH_AFTER * 4)  # the watch has seen the client go
    gate.set()
    reply = await asyncio.wait_for(answered, 10)

    assert reply.status == 0
    [record] = store.records.values()
    assert record.status == "completed"
    assert len(gateway.runs) == 0
