"""``Idempotency-Key`` on Chat Completions and Messages, in process: a retry arriving
while the first request runs waits for its answer; a keyed run goes on when its client
leaves, for its retry to take over; a run that failed is not remembered; a keyed Chat
request keeps the fast path, its relayed answer remembered as it went out."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from starlette.applications import Starlette

from stateway.coordination import MemoryCommandResults
from stateway.coordination.redis import RedisCommandResults, connect
from stateway.core.coordination import CommandResults
from stateway.core.errors import GatewayError, UpstreamError
from stateway.core.gateway import Gateway
from stateway.core.inference import Delta, Finish, TextDelta, UsageReport
from stateway.core.loop import Loop
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.core.runs import CancelReason
from stateway.core.usage import Usage
from stateway.surfaces.http.app import build_http_app
from stateway.surfaces.http.chat import ChatRoutes
from stateway.surfaces.http.messages import MessagesRoutes
from stateway.surfaces.http.responses import ResponsesRoutes
from stateway.surfaces.http.service import ServiceRoutes
from tests.core.fakes import MemoryStore, ScriptedBackend
from tests.surfaces.http import test_chat, test_keyed_relay, test_messages
from tests.surfaces.http.asgi import Reply, call

SCRIPT: list[Delta | GatewayError] = [TextDelta("a"), UsageReport(Usage(3, 1)), Finish("stop")]
CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"
BODIES = {
    CHAT: test_chat.body(),
    MESSAGES: test_messages.body(),
}
STREAMS = {
    CHAT: test_chat.body(stream=True, stream_options={"include_usage": True}),
    MESSAGES: test_messages.body(stream=True),
}
REQUESTS = [(path, stream) for path in (CHAT, MESSAGES) for stream in (False, True)]


def build(backend: ScriptedBackend, results: CommandResults | None = None) -> Starlette:
    store = MemoryStore()
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    results = MemoryCommandResults() if results is None else results
    gateway = Gateway(store, router, Loop(store), RunRegistry(), results=results)
    return build_http_app(
        ResponsesRoutes(gateway, 1 << 20),
        ServiceRoutes(gateway),
        chat=ChatRoutes(gateway, 1 << 20),
        messages=MessagesRoutes(gateway, 1 << 20),
    )


async def post(
    app: Starlette, path: str, stream: bool, leave: asyncio.Event | None = None
) -> Reply:
    body = (STREAMS if stream else BODIES)[path]
    headers = [(b"idempotency-key", b"k1"), (b"anthropic-version", b"2023-06-01")]
    return await call(app, "POST", path, body, leave=leave, headers=headers)


@pytest.mark.parametrize(("path", "stream"), REQUESTS)
async def test_a_retry_while_the_first_runs_waits_for_its_answer(path: str, stream: bool) -> None:
    gate = asyncio.Event()
    backend = ScriptedBackend(SCRIPT, gate)
    app = build(backend)
    first = asyncio.create_task(post(app, path, stream))
    await backend.started.wait()
    joined = asyncio.create_task(post(app, path, stream))  # while it runs
    await asyncio.sleep(0)
    gate.set()
    original, during = await asyncio.gather(first, joined)
    after = await post(app, path, stream)

    assert original.status == during.status == after.status == 200
    assert original.body == during.body == after.body
    media = "text/event-stream" if stream else "application/json"
    assert after.headers["content-type"].startswith(media)
    assert len(backend.requests) == 1


@pytest.mark.parametrize(("path", "stream"), REQUESTS)
async def test_a_keyed_run_goes_on_when_its_client_leaves(path: str, stream: bool) -> None:
    gate = asyncio.Event()
    backend = ScriptedBackend(SCRIPT, gate)
    app = build(backend)
    leave = asyncio.Event()
    leave.set()  # the client is gone as soon as it can be seen gone
    first = asyncio.create_task(post(app, path, stream, leave))
    await backend.started.wait()
    gate.set()
    await first

    retried = await post(app, path, stream)

    assert retried.status == 200
    if stream:  # the whole stream, to its end
        assert retried.body.endswith(b"data: [DONE]\n\n" if path == CHAT else b'message_stop"}\n\n')
    assert len(backend.requests) == 1


@pytest.mark.parametrize(("path", "stream"), REQUESTS)
async def test_a_retry_waiting_while_the_first_client_leaves_gets_the_whole_answer(
    path: str, stream: bool
) -> None:
    """The first client leaves while a retry waits for its answer: the run goes on, and
    the retry gets all of it (a stream to its end), the model asked once."""
    gate = asyncio.Event()
    backend = ScriptedBackend(SCRIPT, gate)
    results = test_keyed_relay.WatchedResults(waits=2)
    app = build(backend, results)
    leave = asyncio.Event()
    leave.set()  # the first client is gone as soon as it can be seen gone
    first = asyncio.create_task(post(app, path, stream, leave))
    await backend.started.wait()
    retry = asyncio.create_task(post(app, path, stream))
    await results.waiting.wait()
    gate.set()
    await first
    retried, again = await retry, await post(app, path, stream)

    assert retried.status == again.status == 200
    assert retried.body == again.body
    if stream:
        assert retried.body.endswith(b"data: [DONE]\n\n" if path == CHAT else b'message_stop"}\n\n')
    assert len(backend.requests) == 1


@pytest.mark.parametrize(("path", "stream"), REQUESTS)
async def test_a_run_that_failed_is_not_remembered(path: str, stream: bool) -> None:
    backend = ScriptedBackend([TextDelta("a"), UpstreamError("down", status=502)])
    app = build(backend)
    failed = await post(app, path, stream)
    if stream:  # its error after its output
        assert failed.status == 200
        assert b"error" in failed.body.rsplit(b"\n\n", 2)[-2]
    else:
        assert failed.status == 502

    backend.script = SCRIPT
    answered, again = await post(app, path, stream), await post(app, path, stream)

    assert answered.status == again.status == 200
    assert answered.body == again.body
    assert len(backend.requests) == 2


@pytest.mark.redis
@pytest.mark.parametrize("path", [CHAT, MESSAGES])
async def test_a_stream_retried_on_another_process_sharing_redis_waits_for_it(
    redis_url: str, path: str
) -> None:
    """The retry reaches another process while the first stream runs: the claim in Redis
    makes it wait, and it gets the remembered stream from Redis."""
    prefix = f"t{uuid.uuid4().hex}:"
    gate = asyncio.Event()
    backend, other = ScriptedBackend(SCRIPT, gate), ScriptedBackend(SCRIPT)
    owner = RedisCommandResults(connect(redis_url), prefix)
    shared = RedisCommandResults(connect(redis_url), prefix)
    try:
        first = asyncio.create_task(post(build(backend, owner), path, True))
        await backend.started.wait()
        joined = asyncio.create_task(post(build(other, shared), path, True))
        await asyncio.sleep(
            0.05
        )  # the retry's claim is refused meanwhile (what holds, holds anyway)
        gate.set()
        original, during = await asyncio.gather(first, joined)
    finally:
        await owner.aclose()
        await shared.aclose()

    assert original.status == during.status == 200
    assert during.body == original.body
    assert during.headers["content-type"].startswith("text/event-stream")
    assert (len(backend.requests), len(other.requests)) == (1, 0)


async def test_a_keyed_chat_request_keeps_the_fast_path() -> None:
    completion = b'{"object": "chat.completion", "vendor": [1, 2.50]}'
    json = {"content-type": "application/json"}
    relay = test_chat.FakeRelay(200, json, [completion], None, whole=True)
    backend = test_chat.ForwardingBackend(relay)
    store = MemoryStore()
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    gateway = Gateway(store, router, Loop(store), RunRegistry(), results=MemoryCommandResults())
    app = build_http_app(
        ResponsesRoutes(gateway, 1 << 20), ServiceRoutes(gateway), chat=ChatRoutes(gateway, 1 << 20)
    )

    keyed, retried = await post(app, CHAT, False), await post(app, CHAT, False)
    assert keyed.status == retried.status == 200
    assert keyed.body == retried.body == completion  # relayed, then remembered as it went
    assert (backend.forwarded, backend.requests) == ([BODIES[CHAT]], [])
    assert relay.closed.is_set()


@pytest.mark.parametrize("path", [CHAT, MESSAGES])
async def test_a_key_reused_with_another_request_is_a_409_and_runs_nothing(path: str) -> None:
    backend = ScriptedBackend(SCRIPT)
    app = build(backend)
    first = await post(app, path, False)
    headers = [(b"idempotency-key", b"k1"), (b"anthropic-version", b"2023-06-01")]
    other = await call(app, "POST", path, STREAMS[path], headers=headers)

    assert (first.status, other.status) == (200, 409)
    assert other.headers["x-should-retry"] == "false"  # the SDKs do not send it again
    if path == CHAT:  # Messages' errors name no parameter
        assert other.json()["error"]["param"] == "Idempotency-Key"
    assert len(backend.requests) == 1


@pytest.mark.parametrize("stream", [False, True])
async def test_a_replayed_messages_answer_carries_a_request_id(stream: bool) -> None:
    app = build(ScriptedBackend(SCRIPT))
    first, retried = await post(app, MESSAGES, stream), await post(app, MESSAGES, stream)

    assert first.headers["request-id"]
    assert retried.headers["request-id"]
    assert retried.body == first.body


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path", [CHAT, MESSAGES])
async def test_a_run_cancelled_is_not_remembered(path: str, stream: bool) -> None:
    """A keyed run cancelled meanwhile (no error: it ends ``cancelled``) leaves no answer
    for its retry, which runs again, streamed or not."""
    gate = asyncio.Event()
    backend = ScriptedBackend(SCRIPT, gate)
    store = MemoryStore()
    runs = RunRegistry()
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    gateway = Gateway(store, router, Loop(store), runs, results=MemoryCommandResults())
    app = build_http_app(
        ResponsesRoutes(gateway, 1 << 20),
        ServiceRoutes(gateway),
        chat=ChatRoutes(gateway, 1 << 20),
        messages=MessagesRoutes(gateway, 1 << 20),
    )
    first = asyncio.create_task(post(app, path, stream))
    await backend.started.wait()
    [run] = list(runs)
    run.cancel(CancelReason.CANCELLED)
    gate.set()
    await first
    assert run.state.status == "cancelled"
    assert run.error is None

    retried = await post(app, path, stream)
    assert retried.status == 200
    assert len(backend.requests) == 2


async def test_a_messages_key_retried_with_other_betas_is_a_409() -> None:
    """The ``anthropic-beta`` features shape what a Messages request asks (a context
    edit, interleaved thinking): a retry naming others is another request, a 409, not
    the first answer; the same features in another order, or named twice, are the same."""
    backend = ScriptedBackend(SCRIPT)
    app = build(backend)
    base = [(b"idempotency-key", b"k-betas"), (b"anthropic-version", b"2023-06-01")]
    body = BODIES[MESSAGES]

    async def sent(*betas: bytes) -> Reply:
        headers = base + [(b"anthropic-beta", beta) for beta in betas]
        return await call(app, "POST", MESSAGES, body, headers=headers)

    first = await sent(b"interleaved-thinking-2025-05-14, context-1m-2025-08-07")
    same = await sent(
        b"context-1m-2025-08-07", b"interleaved-thinking-2025-05-14,context-1m-2025-08-07"
    )
    other = await sent(b"context-1m-2025-08-07")
    plain = await sent()

    assert (first.status, same.status, other.status, plain.status) == (200, 200, 409, 409)
    assert same.body == first.body
    assert len(backend.requests) == 1
