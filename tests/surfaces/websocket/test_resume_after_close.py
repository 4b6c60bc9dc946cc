"""A response created over a socket whose client did not get all of its events as the
connection ended is resumable from another connection: its log is stored when frames of
it were still waiting to be sent, even when its lane had put them all (a short response
ends in a few milliseconds, its frames queued behind ``response.created``)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from stateway.core.gateway import Gateway
from stateway.core.inference import Finish, TextDelta
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.protocols.responses.stream import encode_event_json
from stateway.surfaces.auth.authenticator import IDENTITY, Identity
from stateway.surfaces.websocket.endpoint import WebSocketResponses
from stateway.websocket_config import WebSocketConfig
from tests.core.fakes import MemoryStore, ScriptedBackend
from tests.core.test_background import ended

Frame = dict[str, Any]


class Connection:
    """One client connection to ``app``, in process, reading its first ``reads`` frames
    and then none (its sends wait, as a transport that is full)."""

    def __init__(self, app: WebSocketResponses, reads: int | None = None) -> None:
        self._inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._inbox.put_nowait({"type": "websocket.connect"})
        self._reads = reads
        self.received: asyncio.Queue[Frame] = asyncio.Queue()
        scope = {"type": "websocket", "path": "/v1/responses", "headers": []}
        scope[IDENTITY] = Identity(Principal("default"))
        self._task = asyncio.create_task(app(scope, self._inbox.get, self._send))  # type: ignore[arg-type]

    def put(self, **frame: Any) -> None:
        self._inbox.put_nowait({"type": "websocket.receive", "text": orjson.dumps(frame).decode()})

    async def until_end(self) -> list[Frame]:
        """The frames received until a response's end or an error frame."""
        frames = [await self.received.get()]
        while frames[-1]["type"] not in ("response.completed", "error"):
            frames.append(await self.received.get())
        return frames

    async def leave(self) -> None:
        """The client goes away (no close handshake); returns once the session ended."""
        self._inbox.put_nowait({"type": "websocket.disconnect", "code": 1006})
        await asyncio.wait_for(self._task, 10)

    async def _send(self, message: dict[str, Any]) -> None:
        if message["type"] != "websocket.send":
            return
        if self._reads is not None:
            if self._reads == 0:
                await asyncio.Event().wait()  # not read: the writer waits until closed
            self._reads -= 1
        self.received.put_nowait(orjson.loads(message["text"]))


async def test_a_response_whose_frames_were_queued_as_its_client_left_is_resumed() -> None:
    store = MemoryStore()
    gate = asyncio.Event()
    backend = ScriptedBackend([TextDelta("a"), TextDelta("b"), Finish("stop")], gate)
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    gateway = Gateway(store, router, Loop(store), RunRegistry(), encoder=encode_event_json)
    app = WebSocketResponses(gateway, WebSocketConfig(), 1 << 20)

    first = Connection(app, reads=1)
    first.put(type="response.create", model="m", input="hi")
    created = await first.received.get()
    assert created["type"] == "response.created"
    run = gateway.runs.get(created["response"]["id"])
    assert run is not None
    gate.set()
    await ended(run)  # its lane put every frame; only the first went out
    await first.leave()

    second = Connection(app)
    second.put(type="response.resume", response_id=run.id, starting_after=0)
    resumed = await asyncio.wait_for(second.until_end(), 10)
    await second.leave()
    assert resumed[-1]["type"] == "response.completed", resumed[-1]
    assert [f["sequence_number"] for f in resumed] == list(range(1, len(run.events)))


async def test_a_response_whose_frames_all_went_out_keeps_no_log() -> None:
    """Storing every turn's log would cost every turn (docs/websocket.md)."""
    store = MemoryStore()
    backend = ScriptedBackend([TextDelta("a"), Finish("stop")])
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    gateway = Gateway(store, router, Loop(store), RunRegistry(), encoder=encode_event_json)
    app = WebSocketResponses(gateway, WebSocketConfig(), 1 << 20)

    first = Connection(app)
    first.put(type="response.create", model="m", input="hi")
    frames = await asyncio.wait_for(first.until_end(), 10)
    await first.leave()

    response_id = frames[0]["response"]["id"]
    assert store.events.get(("default", response_id)) is None
    second = Connection(app)
    second.put(type="response.resume", response_id=response_id, starting_after=0)
    [refused] = await asyncio.wait_for(second.until_end(), 10)
    await second.leave()
    assert (refused["status"], refused["error"]["code"]) == (400, "unsupported_parameter")
