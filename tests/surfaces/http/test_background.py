"""Background responses over HTTP, in process: answered at once, streamed without holding
the run, replayed byte for byte, cancelled; watchers that stop reading are dropped."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import pytest
from starlette.applications import Starlette
from starlette.types import Message

from stateway.core.errors import GatewayError, NotFound, UpstreamError
from stateway.core.gateway import Gateway
from stateway.core.inference import Finish, TextDelta
from stateway.core.loop import Loop
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.protocols.responses.stream import encode_event_json
from stateway.surfaces.http.app import build_http_app
from stateway.surfaces.http.responses import ResponsesRoutes
from stateway.surfaces.http.service import ServiceRoutes
from stateway.surfaces.http.sse import SSEResponse, Watcher
from tests.core.fakes import MemoryStore, ScriptedBackend
from tests.surfaces.http.asgi import call, opening_after_keep_alives
from tests.surfaces.http.test_responses import events

BACKGROUND = b'{"model": "m", "input": "hi", "background": true}'
BACKGROUND_STREAM = b'{"model": "m", "input": "hi", "background": true, "stream": true}'


def build(
    backend: ScriptedBackend, store: MemoryStore | None = None, **routes: float
) -> tuple[Starlette, Gateway]:
    store = store or MemoryStore()
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    gateway = Gateway(store, router, Loop(store), RunRegistry(), encoder=encode_event_json)
    app = build_http_app(ResponsesRoutes(gateway, 4096, **routes), ServiceRoutes(gateway))
    return app, gateway


async def settled(gateway: Gateway) -> None:
    await gateway.runs.settle()


async def test_a_background_request_is_answered_once_stored_as_first_announced() -> None:
    gate = asyncio.Event()
    app, gateway = build(ScriptedBackend([TextDelta("a"), Finish("stop")], gate))

    reply = await call(app, "POST", "/v1/responses", BACKGROUND)

    assert reply.status == 200
    body = reply.json()
    assert (body["status"], body["background"], body["output"]) == ("queued", True, [])
    gate.set()
    await settled(gateway)
    done = (await call(app, "GET", f"/v1/responses/{body['id']}")).json()
    assert (done["status"], done["background"]) == ("completed", True)
    assert done["output"][0]["content"][0]["text"] == "a"


@pytest.mark.parametrize("body", [BACKGROUND, BACKGROUND_STREAM], ids=["whole", "stream"])
async def test_a_background_request_whose_row_cannot_be_stored_gets_its_http_error(
    body: bytes,
) -> None:
    """Nothing was announced: the client gets the storage failure (503), not a queued
    response it could never read back, nor a stream of nothing."""
    app, gateway = build(
        ScriptedBackend([TextDelta("a"), Finish("stop")]), MemoryStore(fail_save=True)
    )

    reply = await call(app, "POST", "/v1/responses", body)

    assert reply.status == 503, reply.body
    assert reply.headers["content-type"] == "application/json"
    assert reply.json()["error"]["message"] == "The response could not be stored."
    await settled(gateway)


@pytest.mark.parametrize("body", [BACKGROUND, BACKGROUND_STREAM], ids=["whole", "stream"])
async def test_a_background_run_failing_once_announced_is_still_answered_as_queued(
    body: bytes,
) -> None:
    """Its failure is the stored response's to tell (read with GET), not the create's."""
    app, gateway = build(ScriptedBackend([UpstreamError("Down.")]))

    reply = await call(app, "POST", "/v1/responses", body)
    await settled(gateway)

    assert reply.status == 200, reply.body
    created = reply.json() if body == BACKGROUND else events(reply.body)[0]["response"]
    assert created["status"] == "queued"
    stored = (await call(app, "GET", f"/v1/responses/{created['id']}")).json()
    assert stored["status"] == "failed"


async def test_a_background_stream_opens_once_stored_not_at_its_first_output() -> None:
    """Its ``response.created`` (queued) is sent while the model has said nothing yet."""
    gate = asyncio.Event()

    def watch(message: Message) -> None:
        if b"response.created" in message.get("body", b""):
            gate.set()

    app, gateway = build(ScriptedBackend([TextDelta("a"), Finish("stop")], gate))
    reply = await asyncio.wait_for(
        call(app, "POST", "/v1/responses", BACKGROUND_STREAM, watch=watch), timeout=5
    )
    await settled(gateway)
    assert events(reply.body)[0]["response"]["status"] == "queued"


@pytest.mark.parametrize("read", [False, True], ids=["created", "retrieved"])
async def test_a_silent_background_stream_gets_keep_alive_comments_at_the_routes_interval(
    read: bool,
) -> None:
    """Streamed as created or read with ``stream=true``: the route's keep-alive interval,
    not the default 15 s, so a proxy with a shorter idle timeout keeps the stream open."""
    gate = asyncio.Event()
    watch = opening_after_keep_alives(gate)

    app, gateway = build(ScriptedBackend([TextDelta("a"), Finish("stop")], gate), keepalive=0.05)
    if read:
        created = (await call(app, "POST", "/v1/responses", BACKGROUND)).json()
        path, body, query = f"/v1/responses/{created['id']}", b"", "stream=true"
    else:
        path, body, query = "/v1/responses", BACKGROUND_STREAM, ""
    reply = await asyncio.wait_for(
        call(app, "GET" if read else "POST", path, body, query, watch=watch), timeout=10
    )
    await settled(gateway)

    assert reply.status == 200
    assert reply.body.count(b": keep-alive\n\n") == 2
    assert events(reply.body)[-1]["type"] == "response.completed"


async def test_leaving_a_background_stream_does_not_cancel_it_and_a_replay_is_identical() -> None:
    gate = asyncio.Event()
    leave = asyncio.Event()
    app, gateway = build(ScriptedBackend([TextDelta("a"), TextDelta("b"), Finish("stop")], gate))

    def on_send(message: Message) -> None:
        if b"output_text.delta" in message.get("body", b""):
            leave.set()

    left = await call(app, "POST", "/v1/responses", BACKGROUND_STREAM, leave=leave, watch=on_send)
    assert left.status == 200
    response_id = events(left.body)[0]["response"]["id"]  # type: ignore[index]
    gate.set()
    await settled(gateway)

    replay = await call(app, "GET", f"/v1/responses/{response_id}", query="stream=true")
    assert replay.status == 200
    assert replay.headers["content-type"].startswith("text/event-stream")
    assert replay.body.startswith(left.body)
    seen = events(replay.body)
    assert seen[-1]["type"] == "response.completed"
    resumed = await call(
        app, "GET", f"/v1/responses/{response_id}", query="stream=true&starting_after=3"
    )
    assert replay.body.endswith(resumed.body)
    assert [e["sequence_number"] for e in events(resumed.body)] == list(range(4, len(seen)))


async def test_cancel_answers_the_response_object() -> None:
    gate = asyncio.Event()
    app, gateway = build(ScriptedBackend([TextDelta("a")], gate))
    created = (await call(app, "POST", "/v1/responses", BACKGROUND)).json()

    reply = await call(app, "POST", f"/v1/responses/{created['id']}/cancel")
    gate.set()  # the runs from here on finish

    assert reply.status == 200
    assert (reply.json()["id"], reply.json()["status"]) == (created["id"], "cancelled")
    assert reply.json()["background"] is True
    await settled(gateway)
    foreground = (await call(app, "POST", "/v1/responses", b'{"model": "m", "input": "x"}')).json()
    refused = await call(app, "POST", f"/v1/responses/{foreground['id']}/cancel")
    assert refused.status == 400
    assert refused.json()["error"]["message"] == (
        "Only responses created with background=true can be cancelled."
    )


async def test_streaming_a_response_that_is_not_background_is_refused() -> None:
    app, _ = build(ScriptedBackend([TextDelta("a"), Finish("stop")]))
    created = (await call(app, "POST", "/v1/responses", b'{"model": "m", "input": "x"}')).json()
    reply = await call(app, "GET", f"/v1/responses/{created['id']}", query="stream=true")
    assert reply.status == 400
    error = reply.json()["error"]
    assert (error["param"], error["code"]) == ("stream", "unsupported_parameter")
    assert error["message"] == (  # what HTTP can stream, and what to do instead
        "Only a response created with background=true can be streamed; read this one "
        f"with GET /v1/responses/{created['id']} without 'stream'."
    )


async def never_ending() -> AsyncGenerator[tuple[bytes, bool], None]:
    yield b"data: {}\n\n", False
    await asyncio.Event().wait()
    yield b"", True  # never reached


async def test_a_watcher_whose_client_stops_reading_is_dropped_when_far_behind() -> None:
    blocked = asyncio.Event()
    body_writes = 0
    scope = {"type": "http", "method": "GET", "path": "/"}

    async def receive() -> Message:
        await asyncio.Event().wait()  # the client never leaves
        raise AssertionError

    async def send(message: Message) -> None:
        nonlocal body_writes
        if message["type"] == "http.response.body":
            body_writes += 1
            blocked.set()
            await asyncio.Event().wait()  # a full socket buffer: the write never completes

    lag = {"now": 0}
    response = SSEResponse(
        never_ending(), lambda: None, watcher=Watcher(lambda: lag["now"], 10, 0.001)
    )
    serving = asyncio.create_task(response(scope, receive, send))
    await blocked.wait()
    lag["now"] = 11  # the run went on meanwhile
    await serving  # returns: the connection is closed with the body unfinished

    assert body_writes == 1


class LeavingClient:
    """A client that leaves once the first body chunk is written to it."""

    def __init__(self) -> None:
        self.left = asyncio.Event()
        self.sent: list[Message] = []

    async def receive(self) -> Message:
        await self.left.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        self.sent.append(message)
        if message["type"] == "http.response.body":
            self.left.set()

    def bodies(self) -> list[Message]:
        return [m for m in self.sent if m["type"] == "http.response.body"]


async def test_a_watcher_ends_when_its_client_leaves_while_it_waits_for_events() -> None:
    scope = {"type": "http", "method": "GET", "path": "/"}
    client = LeavingClient()
    response = SSEResponse(never_ending(), lambda: None, watcher=Watcher(lambda: 0))
    await response(scope, client.receive, client.send)  # returns though no event ever comes

    assert [m.get("more_body") for m in client.bodies()] == [True]


async def test_a_watcher_that_keeps_up_is_never_dropped() -> None:
    scope = {"type": "http", "method": "GET", "path": "/"}
    sent: list[bytes] = []

    async def frames() -> AsyncGenerator[tuple[bytes, bool], None]:
        for n in range(3):
            await asyncio.sleep(0.002)  # several lag checks pass meanwhile
            yield b"%d" % n, n == 2

    async def receive() -> Message:
        await asyncio.Event().wait()
        raise AssertionError

    async def send(message: Message) -> None:
        sent.append(message.get("body", b""))

    response = SSEResponse(frames(), lambda: None, watcher=Watcher(lambda: 10**6, 10, 0.001))
    await response(scope, receive, send)
    assert sent[1:] == [b"0", b"1", b"2"]


async def test_a_stream_that_cannot_go_on_ends_with_its_protocols_error_frame() -> None:
    """A watched response deleted meanwhile (no word reaching its run) raises from its
    frames once streaming: the stream ends with the error frame, the body finished,
    not as if it were whole, nor cut mid-body."""
    scope = {"type": "http", "method": "GET", "path": "/"}
    sent: list[Message] = []

    async def frames() -> AsyncGenerator[tuple[bytes, bool], None]:
        yield b"data: 0\n\n", False
        raise NotFound("Response with id 'r' was deleted while it was streamed.")

    async def receive() -> Message:
        await asyncio.Event().wait()
        raise AssertionError

    async def send(message: Message) -> None:
        sent.append(message)

    def ending(error: GatewayError) -> bytes:
        return b"event: error\ndata: " + error.code.encode() + b"\n\n"

    response = SSEResponse(frames(), lambda: None, watcher=Watcher(lambda: 0), ending=ending)
    await response(scope, receive, send)
    bodies = [(m["body"], m["more_body"]) for m in sent if m["type"] == "http.response.body"]
    assert bodies == [(b"data: 0\n\n", True), (b"event: error\ndata: not_found\n\n", False)]


async def test_a_stream_that_cannot_go_on_after_its_client_left_ends_quietly() -> None:
    """Nobody to tell: no error frame is written, and nothing is raised into the server
    (which would log it as an application's failure)."""
    scope = {"type": "http", "method": "GET", "path": "/"}
    client = LeavingClient()

    async def frames() -> AsyncGenerator[tuple[bytes, bool], None]:
        yield b"data: 0\n\n", False
        await client.left.wait()
        await asyncio.sleep(0.01)  # the disconnect is seen first
        raise NotFound("Response with id 'r' was deleted while it was streamed.")

    response = SSEResponse(frames(), lambda: None, ending=lambda error: b"error frame")
    await response(scope, client.receive, client.send)
    assert [m["body"] for m in client.bodies()] == [b"data: 0\n\n"]
