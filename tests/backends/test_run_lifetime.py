"""Runs through the real aiohttp upstream client, against the real fake model server, are
freed by reference counting alone however they end, and leave no gateway frame in a
reference cycle: aiohttp keeps a failed stream's exception on the response's reader, so
that exception's traceback would tie the reader, the response and the frames of the
backend (with the whole upstream request) into a cycle."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Iterator

import pytest

from stateway.backends.chat_forwarder import OpenAIChatBackend
from stateway.backends.upstream_http import UpstreamClient
from stateway.backends.upstream_target import UpstreamTarget
from stateway.core import events as ev
from stateway.core.commands import CreateResponse
from stateway.core.gateway import Gateway
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.fake_upstream.launch import start_fake_upstream
from tests.collector import collector_off, cyclic_garbage, freed, gateway_frames
from tests.core.fakes import MemoryStore

pytestmark = pytest.mark.usefixtures("young_heap")  # they collect garbage


@pytest.fixture(scope="module")
def upstream_url() -> Iterator[str]:
    with start_fake_upstream() as url:
        yield url


def user(text: str) -> dict[str, object]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


@pytest.mark.parametrize(
    ("text", "stream", "leave", "status", "read_timeout"),
    [
        pytest.param("[[slow:20]] [[words:500]]", True, True, "incomplete", 30.0, id="stream-left"),
        pytest.param("[[slow:5000]] [[words:3]]", False, True, "incomplete", 30.0, id="left"),
        pytest.param("[[error:500]]", True, False, "failed", 30.0, id="stream-500"),
        pytest.param("[[error:429]]", False, False, "failed", 30.0, id="429"),
        pytest.param("[[cut:3]] [[words:20]]", True, False, "failed", 30.0, id="stream-cut"),
        pytest.param("[[cut:0]] [[words:20]]", False, False, "failed", 30.0, id="cut"),
        pytest.param("[[slow:2000]] [[words:3]]", True, False, "failed", 0.5, id="stream-timeout"),
        pytest.param("[[words:3]]", True, False, "completed", 30.0, id="stream-completed"),
    ],
)
async def test_runs_leave_no_cycles(
    upstream_url: str,
    text: str,
    stream: bool,
    leave: bool,
    status: str,
    read_timeout: float,
) -> None:
    target = UpstreamTarget("fake", upstream_url, read_timeout=read_timeout)
    backend = OpenAIChatBackend(UpstreamClient(target))
    store = MemoryStore()
    gateway = Gateway(
        store, Router([BackendEntry(backend, {}, catch_all=True)]), Loop(store), RunRegistry()
    )
    try:
        await _warm(gateway)  # the session, connector and pooled connection exist first
        with collector_off():
            run = await gateway.execute(
                Principal(), CreateResponse(model="m", input=[user(text)], stream=stream)
            )  # type: ignore[arg-type]
            task = run.task
            assert task is not None
            if leave:
                for _ in range(2000):
                    if any(isinstance(e, ev.TextDelta) for e in run.events) or run.closed:
                        break
                    if not stream and run.cancellable:
                        await asyncio.sleep(0.05)  # the request is on its way upstream
                        break
                    await asyncio.sleep(0.005)
                run.cancel()
            await asyncio.wait([task], timeout=10)
            assert run.state.status == status, run.state.error
            ref = weakref.ref(run)
            del run, task
            assert await freed(ref)
            assert gateway_frames(cyclic_garbage()) == []
    finally:
        await backend.aclose()


async def _warm(gateway: Gateway) -> None:
    run = await gateway.execute(
        Principal(), CreateResponse(model="m", input=[user("[[words:2]]")], stream=True)
    )  # type: ignore[arg-type]
    await run.wait()
