"""``/v1/responses/compact`` and ``/v1/responses/input_tokens`` in process: decoding on or
off the event loop, the item limit, content type, and the token count's source header."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import orjson
import pytest
from starlette.applications import Starlette

from stateway.core.gateway import Gateway
from stateway.core.inference import Finish, TextDelta
from stateway.core.loop import Loop
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.protocols.responses import decode
from stateway.sealing import AesGcmSealer
from stateway.surfaces.http import responses
from stateway.surfaces.http.app import build_http_app
from stateway.surfaces.http.responses import INLINE_DECODE_BYTES, ResponsesRoutes
from stateway.surfaces.http.service import ServiceRoutes
from tests.core.fakes import MemoryStore, ScriptedBackend
from tests.surfaces.http.asgi import call

SEALER = AesGcmSealer(bytes(32))


def build(token_count: int | None = None, backend: ScriptedBackend | None = None) -> Starlette:
    store = MemoryStore()
    backend = backend or ScriptedBackend([TextDelta("summary"), Finish("stop")])
    backend.token_count = token_count
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    gateway = Gateway(store, router, Loop(store), RunRegistry(), sealer=SEALER)
    routes = ResponsesRoutes(gateway, 4 * INLINE_DECODE_BYTES, max_input_items=2)
    return build_http_app(routes, ServiceRoutes(gateway))


@pytest.fixture
def decoding_threads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    threads: list[int] = []

    def recording(name: str) -> Any:
        original = getattr(decode, name)

        def decoder(raw: bytes, **options: Any) -> Any:
            threads.append(threading.get_ident())
            return original(raw, **options)

        return decoder

    for name in ("decode_compact", "decode_input_tokens"):
        monkeypatch.setattr(responses, name, recording(name))
    return threads


@pytest.mark.parametrize("path", ["/v1/responses/compact", "/v1/responses/input_tokens"])
async def test_where_bodies_are_decoded(decoding_threads: list[int], path: str) -> None:
    app = build(token_count=3)
    small = await call(app, "POST", path, b'{"model": "m", "input": "hi"}')
    assert small.status == 200
    large = orjson.dumps({"model": "m", "input": "x" * (INLINE_DECODE_BYTES + 1)})
    assert (await call(app, "POST", path, large)).status == 200
    assert decoding_threads[0] == threading.get_ident()
    assert decoding_threads[1] != threading.get_ident()


@pytest.mark.parametrize("path", ["/v1/responses/compact", "/v1/responses/input_tokens"])
@pytest.mark.parametrize("padding", [0, INLINE_DECODE_BYTES], ids=["inline", "offloaded"])
async def test_item_limit_and_content_type(path: str, padding: int) -> None:
    """The item limit holds on the event loop and in a worker thread (a large body)."""
    app = build()
    item = {"role": "user", "content": "x"}
    body = orjson.dumps({"model": "m", "input": [item, item, {**item, "content": "x" * padding}]})
    reply = await call(app, "POST", path, body)
    assert (reply.status, reply.json()["error"]["code"]) == (400, "array_above_max_length")
    text = await call(app, "POST", path, b"{}", content_type="text/plain")
    assert text.status == 415


async def test_compact_answers_a_compaction_object() -> None:
    reply = await call(build(), "POST", "/v1/responses/compact", b'{"model": "m", "input": "hi"}')
    body = reply.json()
    assert body["object"] == "response.compaction"
    assert [item["type"] for item in body["output"]] == ["message", "compaction"]


@pytest.mark.parametrize(("counted", "source"), [(7, "upstream"), (None, "estimate")])
async def test_input_tokens_say_where_the_count_comes_from(
    counted: int | None, source: str
) -> None:
    body = b'{"model": "m", "input": "hi"}'
    reply = await call(build(token_count=counted), "POST", "/v1/responses/input_tokens", body)
    assert reply.headers["stateway-token-count"] == source
    answer = reply.json()
    assert answer["object"] == "response.input_tokens"
    if counted is not None:
        assert answer["input_tokens"] == counted
    else:  # a few tokens of JSON, by the estimate (core/token_estimate.py)
        assert 1 <= answer["input_tokens"] < 50


@pytest.mark.parametrize("path", ["/v1/responses/compact", "/v1/responses/input_tokens"])
async def test_a_client_that_leaves_abandons_the_model_call(path: str) -> None:
    """The summary (or the count) is cancelled, its upstream request closed, and nothing
    is answered."""
    gate, leave = asyncio.Event(), asyncio.Event()
    backend = ScriptedBackend([TextDelta("partial")], gate=gate)  # the summary waits
    backend.count_gate = gate
    app = build(token_count=3, backend=backend)
    body = b'{"model": "m", "input": "hi"}'
    request = asyncio.create_task(call(app, "POST", path, body, leave=leave))
    await backend.started.wait()
    leave.set()
    await asyncio.wait_for(backend.closed.wait(), 5)
    assert not gate.is_set()
    assert (await request).status == 0
