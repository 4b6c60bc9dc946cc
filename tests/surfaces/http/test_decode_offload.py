"""The Responses routes in process: where request bodies are decoded, and the item limit."""

from __future__ import annotations

import threading
from typing import Any

import orjson
import pytest
from starlette.applications import Starlette

from stateway.core.commands import CreateResponse
from stateway.core.gateway import Gateway
from stateway.core.inference import Finish, TextDelta
from stateway.core.loop import Loop
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.protocols.responses import decode
from stateway.surfaces.http import responses
from stateway.surfaces.http.app import build_http_app
from stateway.surfaces.http.responses import INLINE_DECODE_BYTES, ResponsesRoutes
from stateway.surfaces.http.service import ServiceRoutes
from tests.core.fakes import MemoryStore, ScriptedBackend
from tests.surfaces.http.asgi import call


def build(max_input_items: int | None = None) -> Starlette:
    store = MemoryStore()
    backend = ScriptedBackend([TextDelta("ok"), Finish("stop")])
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    gateway = Gateway(store, router, Loop(store), RunRegistry())
    routes = ResponsesRoutes(gateway, 4 * INLINE_DECODE_BYTES, max_input_items=max_input_items)
    return build_http_app(routes, ServiceRoutes(gateway))


@pytest.fixture
def decoding_threads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The threads ``decode_create`` ran on, in call order."""
    threads: list[int] = []

    def recording(raw: bytes, **options: Any) -> CreateResponse:
        threads.append(threading.get_ident())
        return decode.decode_create(raw, **options)

    monkeypatch.setattr(responses, "decode_create", recording)
    return threads


async def test_small_bodies_are_decoded_on_the_event_loop(decoding_threads: list[int]) -> None:
    reply = await call(build(), "POST", "/v1/responses", b'{"model": "m", "input": "hi"}')
    assert reply.status == 200
    assert decoding_threads == [threading.get_ident()]


async def test_large_bodies_are_decoded_off_the_event_loop(decoding_threads: list[int]) -> None:
    body = orjson.dumps({"model": "m", "input": "x" * (INLINE_DECODE_BYTES + 1)})
    reply = await call(build(), "POST", "/v1/responses", body)
    assert reply.status == 200
    [thread] = decoding_threads
    assert thread != threading.get_ident()


@pytest.mark.parametrize("padding", [0, INLINE_DECODE_BYTES], ids=["inline", "offloaded"])
async def test_the_item_limit_reaches_the_decoder(padding: int) -> None:
    """On the event loop or in a worker thread (a body past ``INLINE_DECODE_BYTES``)."""
    item = {"role": "user", "content": "x"}
    body = orjson.dumps({"model": "m", "input": [item, item, {**item, "content": "x" * padding}]})
    reply = await call(build(max_input_items=2), "POST", "/v1/responses", body)
    assert reply.status == 400
    assert reply.json()["error"]["code"] == "array_above_max_length"
    assert (await call(build(max_input_items=3), "POST", "/v1/responses", body)).status == 200


async def test_the_session_header_reaches_the_command(decoding_threads: list[int]) -> None:
    """The session a client names (cache affinity: :mod:`.sessions`) is the create's."""
    commands: list[CreateResponse] = []

    def recording(raw: bytes, **options: Any) -> CreateResponse:
        commands.append(decode.decode_create(raw, **options))
        return commands[-1]

    app = build()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(responses, "decode_create", recording)
        headers = [(b"x-session-affinity", b"4f1c-9a")]
        body = b'{"model": "m", "input": "hi"}'
        assert (await call(app, "POST", "/v1/responses", body, headers=headers)).status == 200
        assert (await call(app, "POST", "/v1/responses", body)).status == 200
    assert [command.session for command in commands] == ["4f1c-9a", None]
