"""A keyed Chat Completions request on the fast path, in process: its relayed answer is
remembered only when the relay ended well (a 200 gone out to its end, of the kind a
replay answers with); any other ending leaves the key free, and the retry is relayed
again. A client that leaves closes the relay, as without the key."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from starlette.applications import Starlette

from stateway.coordination import MemoryCommandResults
from stateway.core.coordination import CommandKey, Outcome
from stateway.core.errors import UpstreamError
from stateway.core.gateway import Gateway
from stateway.core.loop import Loop
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.surfaces.http.app import build_http_app
from stateway.surfaces.http.chat import ChatRoutes
from stateway.surfaces.http.responses import ResponsesRoutes
from stateway.surfaces.http.service import ServiceRoutes
from tests.core.fakes import MemoryStore
from tests.surfaces.http.asgi import Reply
from tests.surfaces.http.test_chat import FakeRelay, ForwardingBackend, body, post

SSE = {"content-type": "text/event-stream"}
JSON = {"content-type": "application/json"}
FRAME = b'data: {"object": "chat.completion.chunk", "choices": []}\n\n'
DONE = b"data: [DONE]\n\n"


class WatchedResults(MemoryCommandResults):
    """Outcomes in process, telling when a claim has been asked for ``waits`` times: the
    last asker then waits on the claim under way (nothing suspends it before)."""

    def __init__(self, waits: int) -> None:
        super().__init__()
        self._waits = waits
        self.waiting = asyncio.Event()

    async def claim(
        self, key: CommandKey, fingerprint: str, waiting: Callable[[], None] | None = None
    ) -> Outcome | None:
        self._waits -= 1
        if self._waits == 0:
            self.waiting.set()
        return await super().claim(key, fingerprint, waiting)


def build(backend: ForwardingBackend, results: MemoryCommandResults | None = None) -> Starlette:
    store = MemoryStore()
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    results = MemoryCommandResults() if results is None else results
    gateway = Gateway(store, router, Loop(store), RunRegistry(), results=results)
    return build_http_app(
        ResponsesRoutes(gateway, 1 << 20), ServiceRoutes(gateway), chat=ChatRoutes(gateway, 1 << 20)
    )


async def keyed(app: Starlette, stream: bool, **kwargs: Any) -> Reply:
    raw = body(stream=stream, top_k=3)
    return await post(app, raw, headers=[(b"idempotency-key", b"k1")], **kwargs)


async def test_a_stream_relayed_to_its_end_is_replayed_as_it_went_out() -> None:
    backend = ForwardingBackend(FakeRelay(200, SSE, [b": hi\n\n", FRAME, DONE], None))
    app = build(backend)

    first, retried = await keyed(app, True), await keyed(app, True)

    assert first.body == retried.body == b": hi\n\n" + FRAME + DONE
    assert retried.headers["content-type"].startswith("text/event-stream")
    assert len(backend.forwarded) == 1


@pytest.mark.parametrize(
    ("stream", "relay"),
    [
        (True, FakeRelay(200, SSE, [FRAME, UpstreamError("cut")], None)),  # failed part-way
        (False, FakeRelay(500, JSON, [b'{"error": {"message": "down"}}'], None)),
        (True, FakeRelay(429, SSE, [FRAME, DONE], None)),  # whatever its body, not a 200
        (True, FakeRelay(200, JSON, [b"{}"], None, whole=True)),  # a replay would stream
        (False, FakeRelay(200, SSE, [FRAME, DONE], None)),  # a replay would be JSON
    ],
)
async def test_a_relay_that_did_not_end_well_is_not_remembered(
    stream: bool, relay: FakeRelay
) -> None:
    backend = ForwardingBackend(relay)
    app = build(backend)

    first, again = await keyed(app, stream), await keyed(app, stream)

    assert first.body == again.body  # each relayed as it came
    assert len(backend.forwarded) == 2


async def test_a_client_leaving_a_keyed_relay_closes_it_and_leaves_nothing() -> None:
    silent = FakeRelay(200, SSE, [FRAME], asyncio.Event())  # its gate never set
    backend = ForwardingBackend(silent)
    app = build(backend)
    leave = asyncio.Event()

    def watch(message: Mapping[str, Any]) -> None:
        if message.get("body"):
            leave.set()  # the first chunk arrived: the client goes away

    await keyed(app, True, leave=leave, watch=watch)
    assert silent.closed.is_set()

    backend.relay = FakeRelay(200, SSE, [FRAME, DONE], None)
    retried = await keyed(app, True)
    assert retried.body == FRAME + DONE
    assert len(backend.forwarded) == 2


async def test_a_retry_waiting_for_a_relay_its_client_left_is_relayed_itself() -> None:
    """The first client leaves its relay while a retry waits for its answer: the key is
    let go, and the retry is relayed (it neither hangs nor gets the relay cut short)."""
    silent = FakeRelay(200, SSE, [FRAME], asyncio.Event())  # its gate never set
    backend = ForwardingBackend(silent)
    results = WatchedResults(waits=2)
    app = build(backend, results)
    relaying = asyncio.Event()

    def watch(message: Mapping[str, Any]) -> None:
        if message.get("body"):
            relaying.set()

    leave = asyncio.Event()
    first = asyncio.create_task(keyed(app, True, leave=leave, watch=watch))
    await relaying.wait()
    backend.relay = FakeRelay(200, SSE, [FRAME, DONE], None)  # what the retry is relayed
    retry = asyncio.create_task(keyed(app, True))
    await results.waiting.wait()  # the retry waits for the first's answer
    leave.set()

    await first
    retried = await retry
    assert silent.closed.is_set()
    assert (retried.status, retried.body) == (200, FRAME + DONE)
    assert len(backend.forwarded) == 2
