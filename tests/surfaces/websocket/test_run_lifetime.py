"""Over a WebSocket, a run is freed by reference counting alone once it ends: a long
session's turns, each holding its whole context, must not pile up in reference cycles
until the collector runs."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from stateway.core.gateway import Gateway
from stateway.core.inference import Finish, TextDelta
from stateway.core.principal import Principal
from stateway.core.runs import Run
from stateway.protocols.responses.stream import encode_event_json
from stateway.surfaces.auth.authenticator import IDENTITY, Identity
from stateway.surfaces.websocket.endpoint import WebSocketResponses
from stateway.websocket_config import WebSocketConfig
from tests.collector import WatchedGateway, collector_off, cyclic_garbage, freed
from tests.core.fakes import ScriptedBackend

pytestmark = pytest.mark.usefixtures("young_heap")  # they collect garbage

TURNS = 3


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
    gateway = WatchedGateway(
        ScriptedBackend([TextDelta("ok"), Finish("stop")]), encoder=encode_event_json
    )
    with collector_off():
        received = await session(gateway, store)
        assert received.count("response.completed") == TURNS
        assert len(gateway.started) == TURNS
        for ref in gateway.started:
            assert await freed(ref)
        assert [o for o in cyclic_garbage() if isinstance(o, Run)] == []
