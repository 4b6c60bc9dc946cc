"""A WebSocket session in process: a frame whose handling fails unexpectedly is answered
with a 500 error frame naming no internals, and the connection serves on; a shutdown
refuses the frames that ask for an answer only."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from stateway.core.commands import WatchResponse
from stateway.core.errors import NotFound
from stateway.core.gateway import Gateway
from stateway.core.inference import Finish, TextDelta
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.protocols.responses.stream import encode_event_json
from stateway.surfaces.auth.authenticator import IDENTITY, Identity
from stateway.surfaces.websocket import session, starts
from stateway.surfaces.websocket.endpoint import WebSocketResponses
from stateway.websocket_config import WebSocketConfig
from tests.core.fakes import MemoryStore, ScriptedBackend

FAILING = "fails"


async def converse(
    frames: list[dict[str, Any]], ends: int, *, draining: bool = False
) -> list[dict[str, Any]]:
    """Send ``frames`` on one connection; the frames received until ``ends`` of them
    ended a request (an error frame or a response's end). ``draining``: the server is
    shutting down as they come."""
    store = MemoryStore()
    router = Router([BackendEntry(ScriptedBackend([TextDelta("ok"), Finish("stop")]), {}, True)])
    gateway = Gateway(store, router, Loop(store), RunRegistry(), encoder=encode_event_json)
    app = WebSocketResponses(gateway, WebSocketConfig(), 1 << 20)
    app.draining = draining
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    await inbox.put({"type": "websocket.connect"})
    for frame in frames:
        await inbox.put({"type": "websocket.receive", "text": orjson.dumps(frame).decode()})
    received: list[dict[str, Any]] = []
    done = asyncio.Event()

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "websocket.send":
            received.append(orjson.loads(message["text"]))
            if sum(f["type"] in ("error", "response.completed") for f in received) == ends:
                done.set()
        elif message["type"] == "websocket.close":
            done.set()

    async def receive() -> dict[str, Any]:
        if inbox.empty():
            await done.wait()
            return {"type": "websocket.disconnect", "code": 1000}
        return await inbox.get()

    scope = {"type": "websocket", "path": "/v1/responses", "headers": []}
    scope[IDENTITY] = Identity(Principal("default"))
    await asyncio.wait_for(app(scope, receive, send), 10)  # type: ignore[arg-type]
    return received


@pytest.mark.parametrize("where", ["decode_frame", "_start"])
async def test_an_unexpected_failure_is_a_500_frame_and_the_next_request_runs(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, the exception closed the connection without a close frame (in the frame's
    decoding), or left the lane's request unanswered (once started)."""
    if where == "decode_frame":
        real = session.decode_frame

        def decode(kind: str, fields: dict[str, Any], **kwargs: Any) -> Any:
            if fields.get("input") == FAILING:
                raise TypeError("secret internals")
            return real(kind, fields, **kwargs)

        monkeypatch.setattr(session, "decode_frame", decode)
    else:
        real_start = starts._start

        async def start(gateway: Any, principal: Any, frame: Any, digest: Any) -> Any:
            if frame.command.input[0]["content"][0]["text"] == FAILING:
                raise TypeError("secret internals")
            return await real_start(gateway, principal, frame, digest)

        monkeypatch.setattr(starts, "_start", start)
    create = {"type": "response.create", "model": "m"}
    failing = {**create, "input": FAILING, "stream_id": "a"}
    frames = await converse([failing, {**create, "input": "hi"}], ends=2)
    [error] = [f for f in frames if f["type"] == "error"]
    assert error["status"] == 500
    assert error["stream_id"] == "a"  # on its lane
    assert error["error"]["code"] == "internal_error"
    assert "secret" not in orjson.dumps(error).decode()
    assert frames[-1]["type"] == "response.completed"


async def test_a_resume_whose_response_is_deleted_meanwhile_ends_with_a_404_frame(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Deleted with no word reaching its run (another process runs it, no shared Redis):
    the watch raises, and the lane's events end with the error frame, not silently."""
    event = orjson.dumps({"type": "response.in_progress", "sequence_number": 0})

    class Deleted:
        position = 1

        async def batches(self) -> AsyncIterator[tuple[list[bytes], bool]]:
            yield [event], False
            raise NotFound("Response with id 'resp_x' was deleted while it was streamed.")

        def behind(self) -> int:
            return 0

    real = Gateway.execute

    async def execute(self: Gateway, principal: Principal, command: Any) -> Any:
        if isinstance(command, WatchResponse):
            return Deleted()
        return await real(self, principal, command)

    monkeypatch.setattr(Gateway, "execute", execute)
    frames = await converse([{"type": "response.resume", "response_id": "resp_x"}], ends=1)
    assert [f["type"] for f in frames] == ["response.in_progress", "error"]
    assert frames[-1]["status"] == 404
    assert "deleted while it was streamed" in frames[-1]["error"]["message"]


async def test_a_shutdown_refuses_requests_but_takes_frames_that_ask_no_answer() -> None:
    """Codex's ``response.processed`` and ``response.interrupt`` ask for no answer: a 503
    error frame for one was read as the failure of whatever Codex read next (its next
    turn, or the turn it was interrupting). A create still gets its 503."""
    frames = await converse(
        [
            {"type": "response.processed", "response_id": "resp_1"},
            {
                "type": "response.interrupt",
                "response_id": "resp_1",
                "mode": "discard_partial_items",
            },
            {"type": "response.create", "model": "m", "input": "hi"},
        ],
        ends=1,
        draining=True,
    )
    assert [(f["type"], f["status"], f["error"]["code"]) for f in frames] == [
        ("error", 503, "server_shutting_down")
    ]
    assert frames[0]["headers"] == {"retry-after": "1"}  # another process takes it at once
