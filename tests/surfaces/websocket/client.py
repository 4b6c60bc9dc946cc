"""A WebSocket client of the surface's ASGI app, in process: what it sends goes to the
app's ``receive``, what the app sends is kept in order (the accept, each frame decoded,
the close, an upgrade's HTTP answer)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson

from stateway.coordination import MemoryCommandResults
from stateway.core.gateway import Gateway
from stateway.core.inference import Delta, Finish, TextDelta
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.protocols.responses.stream import encode_event_json
from stateway.surfaces.auth.authenticator import IDENTITY, Identity
from stateway.surfaces.websocket.endpoint import WebSocketResponses
from stateway.websocket_config import WebSocketConfig
from tests.core.fakes import MemoryStore, ScriptedBackend

Frame = dict[str, Any]
ENDS = frozenset({"error", "response.completed", "response.incomplete", "response.failed"})
"""The frames that end a request on its lane."""


def surface(
    script: list[Delta] | None = None,
    gate: asyncio.Event | None = None,
    config: WebSocketConfig | None = None,
    max_frame_bytes: int = 1 << 20,
    backend: ScriptedBackend | None = None,
    **options: Any,
) -> WebSocketResponses:
    """The app over a gateway in memory whose one backend (``backend``, else one) answers
    ``script`` (after ``gate``, when given)."""
    store = MemoryStore()
    if backend is None:
        backend = ScriptedBackend(script or [TextDelta("ok"), Finish("stop")], gate)
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    results = MemoryCommandResults()
    gateway = Gateway(
        store, router, Loop(store), RunRegistry(), encoder=encode_event_json, results=results
    )
    return WebSocketResponses(gateway, config or WebSocketConfig(), max_frame_bytes, **options)


class Client:
    """One connection: :meth:`put` a frame, wait :meth:`until` the app sent what a
    predicate looks for, :meth:`leave`."""

    def __init__(
        self,
        app: WebSocketResponses,
        identity: Identity | None = None,
        headers: list[tuple[bytes, bytes]] | None = None,
        extensions: dict[str, Any] | None = None,
        reads: int | None = None,
        closing: asyncio.Event | None = None,
    ) -> None:
        """``reads``: the frames the client reads, then none (the app's sends of frames
        wait, as over a full transport; its close still arrives); ``closing``: the send
        of the close waits for it."""
        self._reads = reads
        self._closing = closing
        self._inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._inbox.put_nowait({"type": "websocket.connect"})
        self.sent: list[dict[str, Any]] = []
        """What the app sent, in order (a frame's ``text`` decoded as ``frame``)."""
        self._changed = asyncio.Condition()
        scope: dict[str, Any] = {"type": "websocket", "path": "/v1/responses"}
        scope["headers"] = headers or []
        scope[IDENTITY] = identity or Identity(Principal("default"))
        if extensions is not None:
            scope["extensions"] = extensions
        self.task = asyncio.create_task(app(scope, self._inbox.get, self._send))  # type: ignore[arg-type]

    @property
    def frames(self) -> list[Frame]:
        return [m["frame"] for m in self.sent if m["type"] == "websocket.send"]

    @property
    def closes(self) -> list[tuple[int, str]]:
        return [(m["code"], m["reason"]) for m in self.sent if m["type"] == "websocket.close"]

    def put(self, **frame: Any) -> None:
        self.put_text(orjson.dumps(frame).decode())

    def put_text(self, text: str) -> None:
        self._inbox.put_nowait({"type": "websocket.receive", "text": text})

    def put_bytes(self, data: bytes) -> None:
        self._inbox.put_nowait({"type": "websocket.receive", "bytes": data})

    async def until(self, seen: Callable[[Client], bool], seconds: float = 5) -> None:
        async with asyncio.timeout(seconds), self._changed:
            await self._changed.wait_for(lambda: seen(self))

    async def ended(self, requests: int) -> list[Frame]:
        """The frames sent once ``requests`` requests ended (an error frame, a response's
        end)."""
        await self.until(lambda c: sum(f["type"] in ENDS for f in c.frames) >= requests)
        return self.frames

    async def leave(self) -> None:
        """The client goes away; returns once the app returned."""
        self._inbox.put_nowait({"type": "websocket.disconnect", "code": 1000})
        await asyncio.wait_for(self.task, 10)

    async def _send(self, message: dict[str, Any]) -> None:
        message = dict(message)
        if message["type"] == "websocket.close" and self._closing is not None:
            await self._closing.wait()
        if message["type"] == "websocket.send":
            if self._reads is not None:
                if self._reads == 0:
                    await asyncio.Event().wait()
                self._reads -= 1
            message["frame"] = orjson.loads(message["text"])
        self.sent.append(message)
        async with self._changed:
            self._changed.notify_all()
