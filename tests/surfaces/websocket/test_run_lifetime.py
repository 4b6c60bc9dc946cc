"""Over a WebSocket, a run is freed by reference counting alone once it ends: a long
session's turns, each holding its whole context, must not pile up in reference cycles
until the collector runs."""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

import orjson
import pytest

from stateway.core.commands import Command
from stateway.core.gateway import Gateway, Result
from stateway.core.inference import Finish, TextDelta
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.routing import BackendEntry, Router
from stateway.core.runs import Run, RunRegistry
from stateway.protocols.responses.encode import encode_event_json
from stateway.surfaces.auth.authenticator import IDENTITY, Identity
from stateway.surfaces.websocket.endpoint import WebSocketResponses
from stateway.websocket_config import WebSocketConfig
from tests.collector import collector_off, cyclic_garbage, freed
from tests.core.fakes import MemoryStore, ScriptedBackend

TURNS = 3


class WatchedGateway(Gateway):
    """Keeps a weak reference to every run it starts."""

    def __init__(self) -> None:
        store = MemoryStore()
        backend = ScriptedBackend([TextDelta("ok"), Finish("stop")])
        router = Router([BackendEntry(backend, {}, catch_all=True)])
        super().__init__(store, router, Loop(store), RunRegistry(), encoder=encode_event_json)
        self.started: list[weakref.ref[Run]] = []

    async def execute(self, principal: Principal, command: Command) -> Result:  # type: ignore[override]
        result = await super().execute(principal, command)  # type: ignore[call-overload]
        if isinstance(result, Run):
            self.started.append(weakref.ref(result))
        return result  # type: ignore[no-any-return]


async def session(gateway: Gateway, store: bool) -> list[str]:
    """``TURNS`` creates on one connection, each continuing the one before; the types of
    the frames received."""
    app = WebSocketResponses(gateway, WebSocketConfig(), 1 << 20)
    incoming: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    await incoming.put({"type": "websocket.connect"})
    received: list[str] = []
    previous: str | None = None
    turns = 0

    async def create() -> None:
        frame = {"type": "response.create", "model": "m", "input": "hi", "store": store}
        if previous is not None:
            frame["previous_response_id"] = previous
        await incoming.put({"type": "websocket.receive", "text": orjson.dumps(frame).decode()})

    async def send(message: dict[str, Any]) -> None:
        nonlocal previous, turns
        if message["type"] != "websocket.send":
            return
        event = orjson.loads(message["text"])
        received.append(event["type"])
        if event["type"] in ("error", "response.completed"):
            turns += 1
            previous = event.get("response", {}).get("id")
            if turns < TURNS:
                await create()
            else:
                await incoming.put({"type": "websocket.disconnect", "code": 1000})

    await create()
    scope = {"type": "websocket", "path": "/v1/responses", "headers": []}
    scope[IDENTITY] = Identity(Principal("default"))
    await asyncio.wait_for(app(scope, incoming.get, send), 10)  # type: ignore[arg-type]
    return received


@pytest.mark.parametrize("store", [True, False], ids=["stored", "not-stored"])
async def test_the_runs_of_a_session_are_freed_without_the_collector(store: bool) -> None:
    """Before, every stored turn's run stayed in a cycle through its deferred journal."""
    gateway = WatchedGateway()
    with collector_off():
        received = await session(gateway, store)
        assert received.count("response.completed") == TURNS
        assert len(gateway.started) == TURNS
        for ref in gateway.started:
            assert await freed(ref)
        assert [o for o in cyclic_garbage() if isinstance(o, Run)] == []
