"""Streams in process: the held status line, keep-alive comments, bounded body reads."""

from __future__ import annotations

import asyncio
import logging
import time

import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stateway.core.errors import GatewayError, UpstreamError, UpstreamRejected
from stateway.core.gateway import Gateway
from stateway.core.inference import Delta, Finish, TextDelta
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.protocols.responses.stream import encode_event_json
from stateway.surfaces.auth.authenticator import IDENTITY, Identity
from stateway.surfaces.http.app import build_http_app
from stateway.surfaces.http.responses import ResponsesRoutes
from stateway.surfaces.http.service import ServiceRoutes
from tests.core.fakes import MemoryStore, ScriptedBackend
from tests.surfaces.http.asgi import call, stalled

STREAM = b'{"model": "m", "input": "hi", "stream": true}'
SHAPE = {"message", "type", "param", "code"}


def build(backend: ScriptedBackend, store: MemoryStore | None = None, **routes: float) -> Starlette:
    store = store or MemoryStore()
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    gateway = Gateway(store, router, Loop(store), RunRegistry())
    return build_http_app(ResponsesRoutes(gateway, 4096, **routes), ServiceRoutes(gateway))


def events(body: bytes) -> list[dict[str, object]]:
    return [
        orjson.loads(line[6:])
        for frame in body.split(b"\n\n")
        for line in frame.split(b"\n")
        if line.startswith(b"data: ")
    ]


async def test_stream_failing_before_output_answers_with_the_http_error() -> None:
    limited = UpstreamRejected(
        "Rate limited.", status=429, code="rate_limit_exceeded", headers={"Retry-After": "1"}
    )
    cases: list[tuple[GatewayError, int]] = [(limited, 429), (UpstreamError("Down."), 502)]
    for error, status in cases:
        store = MemoryStore()
        reply = await call(build(ScriptedBackend([error]), store), "POST", "/v1/responses", STREAM)
        assert reply.status == status, reply.body
        assert reply.headers["content-type"] == "application/json"
        assert set(reply.json()["error"]) == SHAPE
        assert reply.json()["error"]["code"] == error.code
        if status == 429:
            assert reply.headers["retry-after"] == "1"
        [record] = store.records.values()
        assert record.status == "failed"


async def test_stream_failing_after_output_is_a_200_ending_in_response_failed() -> None:
    script: list[Delta | GatewayError] = [TextDelta("part"), UpstreamError("Cut.")]
    reply = await call(build(ScriptedBackend(script)), "POST", "/v1/responses", STREAM)
    assert reply.status == 200
    seen = events(reply.body)
    assert seen[-1]["type"] == "response.failed"
    assert [e["sequence_number"] for e in seen] == list(range(len(seen)))


async def test_normal_stream_sends_the_whole_log_in_order() -> None:
    backend = ScriptedBackend([TextDelta("a"), TextDelta("b"), Finish("stop")])
    reply = await call(build(backend), "POST", "/v1/responses", STREAM)
    assert reply.status == 200
    assert b"keep-alive" not in reply.body
    seen = events(reply.body)
    assert [e["sequence_number"] for e in seen] == list(range(len(seen)))
    assert [e["type"] for e in seen][:3] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
    ]
    assert seen[-1]["type"] == "response.completed"


async def test_silent_upstream_gets_keep_alive_comments_then_the_stream() -> None:
    gate = asyncio.Event()
    comments = 0

    def watch(message: Message) -> None:
        nonlocal comments
        if message.get("body", b"").startswith(b": keep-alive\n\n"):
            comments += 1
            if comments == 2:
                gate.set()

    backend = ScriptedBackend([], gate=gate)
    app = build(backend, keepalive=0.05)
    reply = await asyncio.wait_for(
        call(app, "POST", "/v1/responses", STREAM, watch=watch), timeout=10
    )
    assert reply.status == 200
    assert comments == 2
    frames = reply.body.split(b"\n\n")[:-1]
    assert frames[0].startswith(b"event: response.created\n")
    assert frames[2] == frames[3] == b": keep-alive"
    assert frames[-1].startswith(b"event: response.completed\n")
    assert [e["sequence_number"] for e in events(reply.body)] == list(range(3))


async def test_status_line_waits_for_output_and_is_sent_after_the_interval() -> None:
    gate = asyncio.Event()
    started: list[float] = []
    loop = asyncio.get_running_loop()

    def watch(message: Message) -> None:
        if message["type"] == "http.response.start":
            started.append(loop.time())
            gate.set()

    begun = loop.time()
    app = build(ScriptedBackend([], gate=gate), keepalive=0.3)
    reply = await asyncio.wait_for(
        call(app, "POST", "/v1/responses", STREAM, watch=watch), timeout=10
    )
    assert reply.status == 200
    assert started[0] - begun >= 0.3
    assert events(reply.body)[-1]["type"] == "response.completed"


async def test_client_leaving_while_the_status_is_held_cancels_the_run() -> None:
    gate, leave = asyncio.Event(), asyncio.Event()
    store = MemoryStore()
    backend = ScriptedBackend([], gate=gate)
    app = build(backend, store)  # the default 15 s interval: leaving must not wait for it
    request = asyncio.create_task(call(app, "POST", "/v1/responses", STREAM, leave=leave))
    await backend.started.wait()
    leave.set()
    reply = await asyncio.wait_for(request, timeout=5)
    assert reply.status == 0  # nothing was sent to a client that left
    [record] = store.records.values()
    assert record.status == "incomplete"


@pytest.mark.parametrize(
    "path", ["/v1/responses", "/v1/responses/compact", "/v1/responses/input_tokens"]
)
async def test_body_that_never_finishes_is_a_408_that_closes_the_connection(path: str) -> None:
    app = build(ScriptedBackend([Finish("stop")]), body_timeout=0.2)
    sent = await stalled(app, path, b'{"model": "m", ')
    assert sent[0]["status"] == 408
    assert (b"connection", b"close") in sent[0]["headers"]
    error = orjson.loads(sent[1]["body"])["error"]
    assert set(error) == SHAPE
    assert error["code"] == "request_timeout"


async def test_a_cache_prewarm_answers_with_no_output_and_asks_no_model() -> None:
    """``prompt_cache_options.prewarm``, as hosted: the response ends without output."""
    backend = ScriptedBackend([TextDelta("never"), Finish("stop")])
    store = MemoryStore()
    body = b'{"model": "m", "input": "hi", "prompt_cache_options": {"prewarm": true}}'
    reply = await call(build(backend, store), "POST", "/v1/responses", body)
    assert reply.status == 200, reply.body
    assert (reply.json()["status"], reply.json()["output"]) == ("completed", [])
    assert backend.requests == []
    [record] = store.records.values()
    assert record.status == "completed"


async def test_client_leaving_mid_stream_logs_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    """A client going away is normal operation: its run's attempt is logged at INFO,
    WARNING is kept for upstreams that fail."""
    gate, leave = asyncio.Event(), asyncio.Event()
    store = MemoryStore()
    backend = ScriptedBackend([TextDelta("part")], gate=gate)

    def watch(message: Message) -> None:
        if b"response.output_text.delta" in message.get("body", b""):
            leave.set()

    with caplog.at_level(logging.INFO):
        reply = await asyncio.wait_for(
            call(build(backend, store), "POST", "/v1/responses", STREAM, watch=watch, leave=leave),
            timeout=5,
        )
        await asyncio.wait_for(backend.closed.wait(), timeout=5)
    assert reply.status == 200
    [record] = store.records.values()
    assert record.status == "incomplete"
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert any("cancelled" in r.getMessage() for r in caplog.records)


async def expiring(
    app: ASGIApp, path: str, body: bytes = b"", query: str = "", **path_params: str
) -> bytes:
    """What ``app`` (a route's) streams to a client whose credential expires in 0.5 s."""
    identity = Identity(Principal(), authenticated=True, expires_at=time.time() + 0.5)
    scope = {
        "type": "http",
        "method": "POST" if body else "GET",
        "path": path,
        "query_string": query.encode(),
        "headers": [(b"content-type", b"application/json")],
        "path_params": path_params,
        IDENTITY: identity,
    }
    parts = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[bytes] = []

    async def receive() -> Message:
        if parts:
            return parts.pop()
        await asyncio.Event().wait()
        raise AssertionError

    async def send(message: Message) -> None:
        sent.append(message.get("body", b""))

    await asyncio.wait_for(app(scope, receive, send), timeout=10)
    return b"".join(sent)


async def test_a_stream_cut_by_its_credentials_expiry_ends_with_the_next_numbered_error() -> None:
    """The ``error`` event takes the sequence number after the last event sent."""
    store = MemoryStore()
    backend = ScriptedBackend([TextDelta("a")], asyncio.Event())
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    gateway = Gateway(store, router, Loop(store), RunRegistry())
    routes = ResponsesRoutes(gateway, 4096)

    seen = events(await expiring(routes.create, "/v1/responses", STREAM))

    assert [e["sequence_number"] for e in seen] == list(range(len(seen)))
    assert (seen[-1]["type"], seen[-1]["code"]) == ("error", "invalid_api_key")
    assert len(seen) > 2  # the text's events came first
    await gateway.runs.settle()


async def test_a_watch_cut_by_its_credentials_expiry_ends_with_the_next_numbered_error() -> None:
    """Read with ``stream=true`` from after its last event: nothing more was sent, so the
    ``error`` event takes the number after ``starting_after``."""
    store = MemoryStore()
    gate = asyncio.Event()
    backend = ScriptedBackend([TextDelta("a")], gate)
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    gateway = Gateway(store, router, Loop(store), RunRegistry(), encoder=encode_event_json)
    routes = ResponsesRoutes(gateway, 4096)
    app = build_http_app(routes, ServiceRoutes(gateway))
    background = b'{"model": "m", "input": "hi", "background": true}'
    created = (await call(app, "POST", "/v1/responses", background)).json()
    run = gateway.runs.get(created["id"])
    assert run is not None
    async for _ in run.subscribe_batches():
        if len(run.events) >= 4:  # the text's first delta logged
            break
    last = len(run.events) - 1

    async def retrieve(scope: Scope, receive: Receive, send: Send) -> None:
        await (await routes.retrieve(Request(scope, receive)))(scope, receive, send)

    path = f"/v1/responses/{created['id']}"
    query = f"stream=true&starting_after={last}"
    seen = events(await expiring(retrieve, path, query=query, response_id=created["id"]))

    assert [(e["type"], e["sequence_number"]) for e in seen] == [("error", last + 1)]
    gate.set()
    await gateway.runs.settle()
