"""``response.interrupt`` reaches only a response its own connection runs: the core stops
any run of the tenant in this process (``InterruptResponse``), so the connection asks it
only for one of its lanes' responses."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from stateway.core.commands import CreateResponse
from stateway.core.gateway import Gateway
from stateway.core.inference import TextDelta
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.protocols.responses.stream import encode_event_json
from stateway.surfaces.auth.authenticator import IDENTITY, Identity
from stateway.surfaces.websocket.endpoint import WebSocketResponses
from stateway.websocket_config import WebSocketConfig
from tests.core.fakes import MemoryStore, ScriptedBackend

ME = Principal("default")


def _text(frame: dict[str, Any]) -> dict[str, Any]:
    return {"type": "websocket.receive", "text": orjson.dumps(frame).decode()}


async def test_an_interrupt_leaves_a_response_another_connection_runs_going() -> None:
    gate = asyncio.Event()
    backend = ScriptedBackend([TextDelta("ok")], gate=gate)
    store = MemoryStore()
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    gateway = Gateway(store, router, Loop(store), RunRegistry(), encoder=encode_event_json)
    hi = [{"type": "message", "role": "user", "content": "hi"}]
    elsewhere = await gateway.execute(ME, CreateResponse("m", hi, stream=True))  # the tenant's
    await backend.started.wait()

    app = WebSocketResponses(gateway, WebSocketConfig(), 1 << 20)
    incoming: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    await incoming.put({"type": "websocket.connect"})
    interrupt = {"type": "response.interrupt", "response_id": elsewhere.id}
    await incoming.put(_text({**interrupt, "mode": "discard_partial_items"}))
    await incoming.put(_text({"type": "response.nothing"}))  # answered once the first is taken
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "websocket.send":
            sent.append(orjson.loads(message["text"]))
            await incoming.put({"type": "websocket.disconnect", "code": 1000})

    scope = {"type": "websocket", "path": "/v1/responses", "headers": []}
    scope[IDENTITY] = Identity(ME)
    await asyncio.wait_for(app(scope, incoming.get, send), 10)  # type: ignore[arg-type]

    [refused] = sent
    assert refused["error"]["code"] == "unknown_frame_type"
    assert elsewhere.cancel_reason is None
    gate.set()
    await elsewhere.wait()
    assert elsewhere.state.status == "completed"
