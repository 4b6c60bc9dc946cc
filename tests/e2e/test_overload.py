"""The gateway's own queue, end to end: when every connection slot to a model server is
busy, requests wait at most ``pool_timeout``, at most ``max_queued_requests`` of them, and
the rest are refused at once; both refusals are 503 ``overloaded`` with ``Retry-After``,
never an upstream timeout."""

from __future__ import annotations

import asyncio
import time
import urllib.request
import uuid
from collections.abc import Iterator

import aiohttp
import orjson
import pytest

from tests.e2e.configured import RunningGateway, configured_gateway

POOL_TIMEOUT = 0.6


@pytest.fixture(scope="module")
def one_slot(
    fake_upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    backend = {"url": fake_upstream, "max_connections": 1, "pool_timeout": POOL_TIMEOUT}
    server = {"max_queued_requests": 1}
    with configured_gateway(tmp_path_factory.mktemp("overload"), backend, server) as gateway:
        yield gateway


def upstream_saw(fake_upstream: str, marker: str) -> bool:
    root = fake_upstream.removesuffix("/v1")
    with urllib.request.urlopen(root + "/_fake/requests") as response:
        return marker in response.read().decode()


async def wait_until_upstream_saw(fake_upstream: str, marker: str) -> None:
    deadline = time.monotonic() + 10
    while not await asyncio.to_thread(upstream_saw, fake_upstream, marker):
        assert time.monotonic() < deadline, "the first request never reached the upstream"
        await asyncio.sleep(0.02)


async def post(
    session: aiohttp.ClientSession, url: str, text: str
) -> tuple[int, dict[str, str], dict[str, object], float]:
    started = time.monotonic()
    body = {"model": "fake-model", "input": text}
    async with session.post(url + "/v1/responses", json=body) as response:
        payload = orjson.loads(await response.read())
        return response.status, dict(response.headers), payload, time.monotonic() - started


async def test_waits_are_bounded_and_excess_is_refused_at_once(
    one_slot: RunningGateway, fake_upstream: str
) -> None:
    marker = uuid.uuid4().hex
    async with aiohttp.ClientSession() as session:
        holder = asyncio.create_task(post(session, one_slot.url, f"{marker} [[slow:3000]]"))
        await wait_until_upstream_saw(fake_upstream, marker)
        # The slot is taken: one of these waits (up to pool_timeout), the other finds the
        # single waiting place taken and is refused at once.
        first, second = await asyncio.gather(
            post(session, one_slot.url, "b"), post(session, one_slot.url, "c")
        )
        refused_at_once, timed_out = sorted([first, second], key=lambda answer: answer[3])
        status, _, _, _ = await holder
    assert status == 200
    for answer_status, headers, payload, _ in (refused_at_once, timed_out):
        assert answer_status == 503
        assert headers["Retry-After"] == "1"
        error = payload["error"]
        assert isinstance(error, dict)
        assert error["code"] == "overloaded"
    assert refused_at_once[3] < POOL_TIMEOUT / 2
    assert "already wait" in refused_at_once[2]["error"]["message"]  # type: ignore[index]
    assert timed_out[3] >= POOL_TIMEOUT
    assert "pool_timeout" in timed_out[2]["error"]["message"]  # type: ignore[index]


async def test_the_slot_serves_again_after_the_refusals(one_slot: RunningGateway) -> None:
    async with aiohttp.ClientSession() as session:
        results = [await post(session, one_slot.url, "again") for _ in range(3)]
    assert [status for status, *_ in results] == [200, 200, 200]


async def queue_depth(session: aiohttp.ClientSession, url: str) -> float:
    async with session.get(url + "/metrics") as response:
        for line in (await response.text()).splitlines():
            if line.startswith("stateway_upstream_queue_depth "):
                return float(line.split()[1])
    raise AssertionError("no stateway_upstream_queue_depth metric")


async def test_a_stream_the_full_queue_cannot_take_is_refused_before_it_starts(
    one_slot: RunningGateway, fake_upstream: str
) -> None:
    """Refused as it is admitted (no stream, no stored response), not at its first call."""
    marker = uuid.uuid4().hex
    async with aiohttp.ClientSession() as session:
        holder = asyncio.create_task(post(session, one_slot.url, f"{marker} [[slow:3000]]"))
        await wait_until_upstream_saw(fake_upstream, marker)
        waiter = asyncio.create_task(post(session, one_slot.url, "b"))
        deadline = time.monotonic() + 10
        while await queue_depth(session, one_slot.url) < 1:
            assert time.monotonic() < deadline, "the second request never waited"
            await asyncio.sleep(0.02)
        body = {"model": "fake-model", "input": "c", "stream": True, "store": True}
        async with session.post(one_slot.url + "/v1/responses", json=body) as response:
            status, headers = response.status, response.headers
            payload = orjson.loads(await response.read())
        await asyncio.gather(holder, waiter)
    assert (status, headers["Retry-After"]) == (503, "1")
    assert payload["error"]["code"] == "overloaded"
    assert "for 'fake-model'" in payload["error"]["message"]
