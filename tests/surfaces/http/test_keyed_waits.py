"""A keyed stream's retry waiting for its key, in process: once it has waited a keep-alive
interval its stream opens (200, the stream's headers) and gets its protocol's keep-alives
while the first request runs; then the first answer follows, or, when the first left
none, the retry's own answer (a failure before its output as the protocol's error event,
the status line being gone). A retry that leaves while it waits leaves the key as it
was."""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import orjson
import pytest
from starlette.applications import Starlette
from starlette.types import Message

from stateway.coordination import MemoryCommandResults
from stateway.coordination.redis import RedisCommandResults, connect
from stateway.core.coordination import CommandKey, CommandResults, Outcome
from stateway.core.errors import (
    CredentialRevoked,
    GatewayError,
    InvalidRequest,
    StorageError,
    UpstreamError,
)
from stateway.core.gateway import Gateway
from stateway.core.inference import Delta, InferenceRequest
from stateway.core.loop import Loop
from stateway.core.principal import Credential, Principal
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.protocols.messages.stream import PING
from stateway.surfaces.auth.authenticator import Authenticator, Identity
from stateway.surfaces.http import chat, messages, sse
from stateway.surfaces.http.app import build_http_app
from stateway.surfaces.http.chat import ChatRoutes
from stateway.surfaces.http.messages import MessagesRoutes
from stateway.surfaces.http.responses import ResponsesRoutes
from stateway.surfaces.http.service import ServiceRoutes
from stateway.surfaces.http.sse import COMMENT
from tests.core.fakes import MemoryStore, ScriptedBackend
from tests.surfaces.http.asgi import Reply, call
from tests.surfaces.http.test_chat import FakeRelay, ForwardingBackend
from tests.surfaces.http.test_keyed_runs import CHAT, MESSAGES, SCRIPT, STREAMS

KEEPALIVE = 0.01
"""The routes' keep-alive interval here: a waiting retry's stream opens after it."""
IDLE = {CHAT: COMMENT, MESSAGES: PING}
SSE = {"content-type": "text/event-stream"}
FRAME = b'data: {"object": "chat.completion.chunk", "choices": []}\n\n'
DONE = b"data: [DONE]\n\n"
FOREVER = 30.0
"""Seconds a test waits for what must come (a guard, not a timing)."""


def build(
    backend: ScriptedBackend, results: CommandResults, authenticator: Authenticator | None = None
) -> Starlette:
    store = MemoryStore()
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    gateway = Gateway(store, router, Loop(store), RunRegistry(), results=results)
    return build_http_app(
        ResponsesRoutes(gateway, 1 << 20),
        ServiceRoutes(gateway),
        chat=ChatRoutes(gateway, 1 << 20, keepalive=KEEPALIVE),
        messages=MessagesRoutes(gateway, 1 << 20, keepalive=KEEPALIVE),
        authenticator=authenticator,
    )


class Scripts(ScriptedBackend):
    """Answers each call with the next of ``scripts``."""

    def __init__(self, *scripts: list[Delta | GatewayError]) -> None:
        super().__init__(scripts[0])
        self.scripts = list(scripts)

    async def infer(self, request: InferenceRequest) -> AsyncGenerator[Delta, None]:
        self.script = self.scripts.pop(0)
        async for delta in super().infer(request):
            yield delta


def seeing(idle: bytes, seen: asyncio.Event) -> Callable[[Message], None]:
    """A ``watch`` setting ``seen`` at the first keep-alive sent."""

    def watch(message: Message) -> None:
        if message.get("body") == idle:
            seen.set()

    return watch


async def post(app: Starlette, path: str, *sent: tuple[bytes, bytes], **kwargs: Any) -> Reply:
    """A keyed stream to ``path``, with the headers ``sent`` besides."""
    headers = [(b"idempotency-key", b"k1"), (b"anthropic-version", b"2023-06-01"), *sent]
    return await call(app, "POST", path, STREAMS[path], headers=headers, **kwargs)


async def first_running(app: Starlette, path: str, started: asyncio.Event) -> asyncio.Task[Reply]:
    """The first request with the key, posted, once its backend was asked (``started``)."""
    first = asyncio.create_task(post(app, path))
    await started.wait()
    return first


async def waiting_retry(
    app: Starlette, path: str, *sent: tuple[bytes, bytes], **kwargs: Any
) -> asyncio.Task[Reply]:
    """A retry posted while the first runs, once it got a keep-alive."""
    alive = asyncio.Event()
    watch = seeing(IDLE[path], alive)
    retry = asyncio.create_task(post(app, path, *sent, watch=watch, **kwargs))
    await asyncio.wait_for(alive.wait(), FOREVER)
    return retry


def events(path: str, reply: Reply) -> bytes:
    """A stream's body without its keep-alives."""
    return reply.body.replace(IDLE[path], b"")


@pytest.mark.parametrize("path", [CHAT, MESSAGES])
async def test_a_waiting_retry_gets_keep_alives_then_the_first_answer(path: str) -> None:
    gate = asyncio.Event()
    backend = ScriptedBackend(SCRIPT, gate)
    app = build(backend, MemoryCommandResults())
    first = await first_running(app, path, backend.started)

    retry = await waiting_retry(app, path)
    assert not first.done()  # kept alive while the first runs
    gate.set()
    original, retried = await first, await retry

    assert (original.status, retried.status) == (200, 200)
    assert retried.headers["content-type"].startswith("text/event-stream")
    assert retried.headers["x-accel-buffering"] == "no"
    if path == MESSAGES:
        assert retried.headers["request-id"]
    assert retried.body.startswith(IDLE[path])
    assert events(path, retried) == events(path, original)
    assert len(backend.requests) == 1


@pytest.mark.parametrize("path", [CHAT, MESSAGES])
async def test_a_waiting_retry_runs_itself_in_its_stream_when_the_first_failed(
    path: str,
) -> None:
    """The first fails before any output: the retry, whose status line went out, runs
    the request itself and streams its own answer."""
    backend = Scripts([UpstreamError("down", status=502)], SCRIPT)
    backend.seat = asyncio.Event()
    app = build(backend, MemoryCommandResults())
    first = await first_running(app, path, backend.started)

    retry = await waiting_retry(app, path)
    backend.seat.set()
    failed, retried = await first, await retry
    again = await post(app, path)  # the retry's answer, remembered

    assert b"down" in failed.body  # its error: a status, or an event once it opened
    assert retried.status == again.status == 200
    assert events(path, retried) == events(path, again)
    ending = b"data: [DONE]\n\n" if path == CHAT else b'message_stop"}\n\n'
    assert retried.body.endswith(ending)
    assert len(backend.requests) == 2


@pytest.mark.parametrize("path", [CHAT, MESSAGES])
async def test_a_waiting_retry_failing_before_output_ends_with_an_error_event(
    path: str,
) -> None:
    backend = ScriptedBackend([UpstreamError("down", status=502)])
    backend.seat = asyncio.Event()
    app = build(backend, MemoryCommandResults())
    first = await first_running(app, path, backend.started)

    retry = await waiting_retry(app, path)
    backend.seat.set()
    failed, retried = await first, await retry

    assert b"down" in failed.body
    assert retried.status == 200
    last = events(path, retried).rstrip(b"\n").rsplit(b"\n\n", 1)[-1]
    if path == CHAT:  # the error line of a stream cut off
        assert last.startswith(b'data: {"error":{"message":"down"')
    else:
        assert last.startswith(b"event: error\ndata: ")
        assert b'"type":"api_error"' in last
    assert len(backend.requests) == 2


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def results(request: pytest.FixtureRequest) -> AsyncIterator[CommandResults]:
    """Where the outcomes are kept: in process, or in Redis (where a waiter polls)."""
    if request.param == "memory":
        kept: CommandResults = MemoryCommandResults()
    else:
        url: str = request.getfixturevalue("redis_url")
        kept = RedisCommandResults(connect(url), f"test:{uuid.uuid4().hex}:")
    yield kept
    await kept.aclose()


async def leaving(app: Starlette, path: str) -> None:
    """A retry that leaves once it got a keep-alive: its call ends with it."""
    leave = asyncio.Event()
    retry = asyncio.create_task(post(app, path, leave=leave, watch=seeing(IDLE[path], leave)))
    left = await asyncio.wait_for(retry, FOREVER)
    assert left.status == 200


@pytest.mark.parametrize("path", [CHAT, MESSAGES])
async def test_a_retry_leaving_while_it_waits_leaves_the_key_as_it_was(
    path: str, results: CommandResults
) -> None:
    gate = asyncio.Event()
    backend = ScriptedBackend(SCRIPT, gate)
    app = build(backend, results)
    first = await first_running(app, path, backend.started)

    await leaving(app, path)
    assert not first.done()  # the first goes on
    gate.set()
    original = await first
    again = await post(app, path)

    assert events(path, again) == events(path, original)  # the first's, remembered
    assert len(backend.requests) == 1


@pytest.mark.parametrize("path", [CHAT, MESSAGES])
async def test_a_retry_leaving_while_a_failing_first_waits_leaves_the_key_free(
    path: str, results: CommandResults
) -> None:
    backend = Scripts([UpstreamError("down", status=502)], SCRIPT)
    backend.seat = asyncio.Event()
    app = build(backend, results)
    first = await first_running(app, path, backend.started)

    await leaving(app, path)
    backend.seat.set()
    await first
    again = await post(app, path)  # runs: nothing was remembered, nothing holds the key

    assert again.status == 200
    assert b"down" not in again.body
    assert len(backend.requests) == 2


class Relays(ForwardingBackend):
    """Forwards each body to the next of ``relays``."""

    def __init__(self, *relays: FakeRelay) -> None:
        super().__init__(relays[0])
        self.relays = list(relays)

    async def forward_chat(self, body: bytes, fields: Any) -> FakeRelay:
        self.forwarded.append(body)
        self.started.set()
        return self.relays.pop(0)


class Refusing(FakeRelay):
    """A relay of an error status, telling the error a translated request would get."""

    def failure(self) -> GatewayError:  # type: ignore[override]
        return UpstreamError("overloaded", status=503)


async def test_a_waiting_fast_path_retry_gets_keep_alives_then_the_relayed_answer() -> None:
    gate = asyncio.Event()
    backend = Relays(FakeRelay(200, SSE, [FRAME, DONE], gate))
    app = build(backend, MemoryCommandResults())
    first = await first_running(app, CHAT, backend.started)

    retry = await waiting_retry(app, CHAT)
    gate.set()
    original, retried = await first, await retry

    assert original.body == FRAME + DONE
    assert retried.status == 200
    assert retried.headers["content-type"].startswith("text/event-stream")
    assert events(CHAT, retried) == FRAME + DONE
    assert len(backend.forwarded) == 1


JSON = {"content-type": "application/json"}
ERROR = b'{"error": {"message": "busy"}}'
SECOND = {
    "stream": (lambda: FakeRelay(200, SSE, [FRAME, DONE], None), FRAME + DONE),
    "refused": (
        lambda: Refusing(503, JSON, [ERROR], None),
        b'data: {"error":{"message":"overloaded"',
    ),
    "whole": (
        lambda: FakeRelay(200, JSON, [b"{}"], None, whole=True),
        b'data: {"error":{"message":"The model server answered a streamed request with no',
    ),
}
"""The retry's own relay, and how its stream begins."""


@pytest.mark.parametrize("relayed", list(SECOND))
async def test_a_waiting_fast_path_retry_relays_in_its_stream_when_the_first_failed(
    relayed: str,
) -> None:
    gate = asyncio.Event()
    make, begins = SECOND[relayed]
    second = make()
    backend = Relays(FakeRelay(503, JSON, [ERROR], gate), second)
    app = build(backend, MemoryCommandResults())
    first = await first_running(app, CHAT, backend.started)

    retry = await waiting_retry(app, CHAT)
    gate.set()
    failed, retried = await first, await retry

    assert (failed.status, retried.status) == (503, 200)
    assert events(CHAT, retried).startswith(begins)
    assert retried.body.endswith(b"\n\n")
    assert second.closed.is_set()
    assert len(backend.forwarded) == 2


async def test_a_waiting_chat_retrys_error_names_the_field_as_sent() -> None:
    """What would have been its error status's answer, param and all: the field as the
    Chat request sent it, not as the gateway's canonical request names it."""
    backend = ScriptedBackend([InvalidRequest("Too long.", param="input")])
    backend.seat = asyncio.Event()
    app = build(backend, MemoryCommandResults())
    first = await first_running(app, CHAT, backend.started)

    retry = await waiting_retry(app, CHAT)
    backend.seat.set()
    _, retried = await first, await retry

    last = events(CHAT, retried).rstrip(b"\n").rsplit(b"\n\n", 1)[-1]
    error = orjson.loads(last.removeprefix(b"data: "))["error"]
    assert (error["message"], error["param"]) == ("Too long.", "messages")


def broken_recording(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug after a stream's end: recording its events for a retry raises."""

    def recorded(*args: object) -> bytes:
        raise RuntimeError("a bug")

    module = chat if path == CHAT else messages
    monkeypatch.setattr(module, "_recorded", recorded)


def statuses(sent: list[Message]) -> list[int]:
    return [message["status"] for message in sent if message["type"] == "http.response.start"]


@pytest.mark.parametrize("path", [CHAT, MESSAGES])
async def test_an_unexpected_error_after_a_keyed_stream_began_leaves_the_app(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As an unkeyed stream's failing once started: the error goes out of the app (the
    server logs it and closes the connection), never answered with a second status line
    after the stream's, nor anything after its body's end."""
    broken_recording(path, monkeypatch)
    app = build(ScriptedBackend(SCRIPT), MemoryCommandResults())
    sent: list[Message] = []

    with pytest.raises(RuntimeError, match="a bug"):
        await post(app, path, watch=sent.append)

    assert statuses(sent) == [200]
    assert sent[-1]["more_body"] is False


@pytest.mark.parametrize("path", [CHAT, MESSAGES])
async def test_an_unexpected_error_in_a_waiting_retrys_open_stream_leaves_the_app(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first failed: the retry runs itself in the stream it opened while it waited,
    and a bug after that is the server's to end, as above."""
    broken_recording(path, monkeypatch)
    backend = Scripts([UpstreamError("down", status=502)], SCRIPT)
    backend.seat = asyncio.Event()
    app = build(backend, MemoryCommandResults())
    first = await first_running(app, path, backend.started)
    sent: list[Message] = []
    alive = asyncio.Event()

    def watch(message: Message) -> None:
        sent.append(message)
        seeing(IDLE[path], alive)(message)

    retry = asyncio.create_task(post(app, path, watch=watch))
    await asyncio.wait_for(alive.wait(), FOREVER)
    backend.seat.set()
    await first

    with pytest.raises(RuntimeError, match="a bug"):
        await retry
    assert statuses(sent) == [200]


REVOKED = "This API key has been revoked."
ENDED = re.compile(b"invalid_api_key|authentication_error")
"""What a stream's auth error carries (Chat's, Messages')."""


class Keys(Authenticator):
    """Two API keys of one principal (its keyed requests share their keys): a lasting
    one, and one (sent as ``x-api-key: revocable``) checked every 10 ms as a stream's is
    (:class:`RevocationWatch`), revoked at :meth:`revoke`."""

    def __init__(self) -> None:
        super().__init__()
        self.ignores_credentials = False
        self.revoked = False
        principal = Principal("acme", "key_1", Credential.API_KEY)
        self.lasting = Identity(principal, authenticated=True)
        self.revocable = Identity(
            principal, authenticated=True, recheck=self._recheck, recheck_every=0.01
        )

    async def identify(self, headers: Iterable[tuple[bytes, bytes]]) -> Identity:
        return self.revocable if REVOCABLE in headers else self.lasting

    async def _recheck(self) -> None:
        if self.revoked:
            raise CredentialRevoked(REVOKED)

    def revoke(self) -> None:
        self.revoked = True


REVOCABLE = (b"x-api-key", b"revocable")


def revoked_ending(path: str, reply: Reply) -> bytes:
    """The last frame of a stream, which a revocation ended: its protocol's auth error."""
    last = events(path, reply).rstrip(b"\n").rsplit(b"\n\n", 1)[-1] + b"\n\n"
    if path == CHAT:
        error = orjson.loads(last.removeprefix(b"data: "))["error"]
        assert (error["code"], error["message"]) == ("invalid_api_key", REVOKED)
    else:
        assert last.startswith(b"event: error\ndata: ")
        error = orjson.loads(last.split(b"data: ", 1)[1])["error"]
        assert error == {"type": "authentication_error", "message": REVOKED}
    return last


@pytest.mark.parametrize("path", [CHAT, MESSAGES])
async def test_a_waiting_retry_whose_key_is_revoked_ends_with_its_auth_error(
    path: str, results: CommandResults
) -> None:
    """Its stream open, the retry's key is checked as a stream's is: revoked, its wait
    ends with its protocol's authentication error; the first goes on, its answer
    remembered for the key's next retry."""
    gate = asyncio.Event()
    backend = ScriptedBackend(SCRIPT, gate)
    keys = Keys()
    app = build(backend, results, keys)
    first = await first_running(app, path, backend.started)

    retry = await waiting_retry(app, path, REVOCABLE)
    keys.revoke()
    revoked = await asyncio.wait_for(retry, FOREVER)
    assert not first.done()  # nothing of the first cancelled
    gate.set()
    original = await first
    again = await post(app, path)

    assert revoked.status == 200
    assert revoked.body.startswith(IDLE[path])
    revoked_ending(path, revoked)
    assert events(path, again) == events(path, original)
    assert len(backend.requests) == 1


@pytest.mark.parametrize("path", [CHAT, MESSAGES])
async def test_a_waiting_retry_revoked_while_a_failing_first_runs_leaves_the_key_free(
    path: str, results: CommandResults
) -> None:
    backend = Scripts([UpstreamError("down", status=502)], SCRIPT)
    backend.seat = asyncio.Event()
    keys = Keys()
    app = build(backend, results, keys)
    first = await first_running(app, path, backend.started)

    retry = await waiting_retry(app, path, REVOCABLE)
    keys.revoke()
    revoked = await asyncio.wait_for(retry, FOREVER)
    backend.seat.set()
    await first
    again = await post(app, path)  # runs: the revoked retry holds nothing

    revoked_ending(path, revoked)
    assert again.status == 200
    assert b"down" not in again.body
    assert len(backend.requests) == 2


@pytest.mark.parametrize("path", [CHAT, MESSAGES])
async def test_a_first_answer_replayed_into_a_revoked_retrys_stream_is_cut(path: str) -> None:
    """The replay sent into a waiting retry's open stream is watched as a stream is: its
    key revoked while its client is slow to read it, it ends with its auth error."""
    gate = asyncio.Event()
    backend = ScriptedBackend(SCRIPT, gate)
    keys = Keys()
    app = build(backend, MemoryCommandResults(), keys)
    first = await first_running(app, path, backend.started)
    stalled = asyncio.Event()

    async def read(message: Message) -> None:  # the first's answer is not read
        body = message.get("body", b"")
        if body not in (b"", IDLE[path]) and not ENDED.search(body):
            stalled.set()
            await asyncio.Event().wait()

    retry = await waiting_retry(app, path, REVOCABLE, read=read)
    gate.set()
    await first
    await asyncio.wait_for(stalled.wait(), FOREVER)
    keys.revoke()
    revoked = await asyncio.wait_for(retry, FOREVER)

    assert events(path, revoked).startswith(revoked_ending(path, revoked))  # alone


def never_read(stalls: Callable[[bytes], bool]) -> Callable[[Message], Awaitable[None]]:
    """A ``read`` that takes in nothing from the first body ``stalls`` on (a full socket
    buffer: never written)."""

    async def read(message: Message) -> None:
        if stalls(message.get("body", b"")):
            await asyncio.Event().wait()

    return read


UNREAD = {
    "error event": lambda body: bool(ENDED.search(body)),
    "keep-alive": lambda body: body in IDLE.values(),
}
"""Where a waiting retry's client stops reading: at its error event, or at a keep-alive
(which must go out whole before it)."""


@pytest.mark.parametrize("unread", UNREAD)
@pytest.mark.parametrize("path", [CHAT, MESSAGES])
async def test_a_revoked_retry_whose_client_reads_nothing_more_is_given_up(
    path: str, unread: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A waiting retry's stream cut off (its key revoked) ends as any stream's does: a
    client that reads nothing more is waited for a while only, then its connection is
    left unfinished (closed), logged; the first goes on."""
    monkeypatch.setattr(sse, "ENDING_WAIT", 0.05)
    gate = asyncio.Event()
    backend = ScriptedBackend(SCRIPT, gate)
    keys = Keys()
    app = build(backend, MemoryCommandResults(), keys)
    first = await first_running(app, path, backend.started)

    retry = await waiting_retry(app, path, REVOCABLE, read=never_read(UNREAD[unread]))
    with caplog.at_level(logging.WARNING, logger=sse.__name__):
        keys.revoke()
        left = await asyncio.wait_for(retry, FOREVER)
    assert not first.done()
    gate.set()
    await first

    assert left.status == 200
    assert not ENDED.search(left.body)
    [record] = caplog.records
    assert record.getMessage() == (
        "left a stream unfinished (invalid_api_key): its client did not read the last "
        "frame within 0.05 seconds"
    )


class LostStore(MemoryCommandResults):
    """Outcomes in a store that finds another attempt running each claim, then fails
    while its caller waits (Redis lost), at :attr:`lost`."""

    def __init__(self) -> None:
        super().__init__()
        self.lost = asyncio.Event()

    async def claim(
        self, key: CommandKey, fingerprint: str, waiting: Callable[[], None] | None = None
    ) -> Outcome | None:
        if waiting is not None:
            waiting()
        await self.lost.wait()
        raise StorageError("The coordination store (Redis) is unavailable.")


@pytest.mark.parametrize("path", [CHAT, MESSAGES])
async def test_a_failed_wait_whose_client_reads_nothing_more_is_given_up(
    path: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A waiting retry's store failing once its stream opened ends it with an error event;
    a client that does not read it is waited for a while only."""
    monkeypatch.setattr(sse, "ENDING_WAIT", 0.05)
    store = LostStore()
    app = build(ScriptedBackend(SCRIPT), store)
    read = never_read(lambda body: body not in (b"", IDLE[path]))  # its error event

    retry = await waiting_retry(app, path, read=read)
    with caplog.at_level(logging.WARNING, logger=sse.__name__):
        store.lost.set()
        left = await asyncio.wait_for(retry, FOREVER)

    assert left.status == 200
    assert events(path, left) == b""
    [record] = caplog.records
    assert record.getMessage() == (
        "left a stream unfinished (storage_unavailable): its client did not read the last "
        "frame within 0.05 seconds"
    )


class SlowStore(MemoryCommandResults):
    """Outcomes in a store slow to answer a claim (a Redis past its keep-alive interval),
    then failing."""

    async def claim(
        self, key: CommandKey, fingerprint: str, waiting: Callable[[], None] | None = None
    ) -> Outcome | None:
        await asyncio.sleep(KEEPALIVE * 5)  # the store's slowness, not a wait for an event
        raise StorageError("The coordination store (Redis) is unavailable.")


@pytest.mark.parametrize("path", [CHAT, MESSAGES])
async def test_a_first_request_whose_claim_is_slow_keeps_its_error_status(path: str) -> None:
    """Only a request that waits for another attempt opens its stream while it waits: a
    first one whose claim takes longer than a keep-alive interval is answered as ever, its
    store's failure a 503 (which clients retry), not an error event in a stream."""
    reply = await post(build(ScriptedBackend(SCRIPT), SlowStore()), path)

    assert reply.status == 503
    assert not reply.headers["content-type"].startswith("text/event-stream")


async def test_a_waiting_fast_path_retrys_refusal_whose_client_reads_nothing_more_is_given_up(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The error line of a waiting retry's own relay refused (an error status, in a stream
    already open) is waited for a while only, as every stream's last frame is."""
    monkeypatch.setattr(sse, "ENDING_WAIT", 0.05)
    gate = asyncio.Event()
    backend = Relays(FakeRelay(503, JSON, [ERROR], gate), Refusing(503, JSON, [ERROR], None))
    app = build(backend, MemoryCommandResults())
    first = await first_running(app, CHAT, backend.started)
    read = never_read(lambda body: body not in (b"", IDLE[CHAT]))  # its error line

    retry = await waiting_retry(app, CHAT, read=read)
    with caplog.at_level(logging.WARNING, logger=sse.__name__):
        gate.set()
        failed, left = await first, await asyncio.wait_for(retry, FOREVER)

    assert (failed.status, left.status) == (503, 200)
    assert events(CHAT, left) == b""
    [record] = [r for r in caplog.records if r.name == sse.__name__]
    assert record.getMessage() == (
        "left a stream unfinished (upstream_error): its client did not read the last "
        "frame within 0.05 seconds"
    )
