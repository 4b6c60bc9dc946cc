"""Through the HTTP surface, a run is freed by reference counting alone whether its client
stays, leaves mid-stream, leaves a non-stream request, or gets an upstream error."""

from __future__ import annotations

import asyncio

import pytest

from stateway.core.errors import GatewayError, UpstreamError
from stateway.core.inference import Delta, Finish, TextDelta
from stateway.surfaces.http.app import build_http_app
from stateway.surfaces.http.responses import ResponsesRoutes
from stateway.surfaces.http.service import ServiceRoutes
from tests.collector import WatchedGateway, collector_off, cyclic_garbage, freed, gateway_frames
from tests.core.fakes import ScriptedBackend
from tests.surfaces.http.asgi import call

pytestmark = pytest.mark.usefixtures("young_heap")  # they collect garbage


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "non-stream"])
@pytest.mark.parametrize(
    ("script", "leave", "statuses"),
    [
        pytest.param([TextDelta("partial")], True, {0, 200}, id="client-leaves"),
        # a stream that fails before any output may answer 200 (then response.failed) or
        # the error status itself
        pytest.param([UpstreamError("boom")], False, {200, 502}, id="fails-before-output"),
        pytest.param([TextDelta("a"), UpstreamError("boom")], False, {200}, id="fails-after"),
        pytest.param([TextDelta("ok"), Finish("stop")], False, {200}, id="completes"),
    ],
)
async def test_runs_are_freed_without_the_collector(
    script: list[Delta | GatewayError], leave: bool, statuses: set[int], stream: bool
) -> None:
    backend = ScriptedBackend(script, gate=asyncio.Event() if leave else None)
    gateway = WatchedGateway(backend)
    app = build_http_app(ResponsesRoutes(gateway, 4096), ServiceRoutes(gateway))
    body = b'{"model": "m", "input": "hi", "stream": %s}' % (b"true" if stream else b"false")
    with collector_off():
        left = asyncio.Event()
        reply = asyncio.create_task(call(app, "POST", "/v1/responses", body, leave=left))
        if leave:
            await backend.started.wait()
            left.set()
        assert (await reply).status in statuses  # 0: left before the answer started
        [ref] = gateway.started
        assert await freed(ref)
        await backend.closed.wait()
        assert gateway_frames(cyclic_garbage()) == []
