"""Bursts after idle time against an upstream with a 1 s keep-alive: pooled connections
the upstream closes just as they are reused are retried on fresh ones, so no request fails.

Each burst's requests finish over ~100 ms (``[[slow:N]]``), so at the next burst some
pooled connections are always about to reach the upstream's keep-alive. Without the retry
about one request in ten failed here with "connection to model server failed"."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import aiohttp
import pytest

from stateway.fake_upstream.launch import start_fake_upstream
from tests.e2e.configured import RunningGateway, configured_gateway

BURST = 50
GAPS = [0.88, 0.9, 0.92, 0.88, 0.9, 0.92]
"""Idle seconds between bursts: just under the upstream's keep-alive."""


@pytest.fixture(scope="module")
def short_keep_alive(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    directory = tmp_path_factory.mktemp("stale")
    with (
        start_fake_upstream(keep_alive=1) as upstream,
        configured_gateway(directory, {"url": upstream}) as gateway,  # pool_idle_timeout 4 s
    ):
        yield gateway


async def burst(session: aiohttp.ClientSession, url: str) -> list[str]:
    """One burst; the error messages of the requests that failed."""

    async def one(index: int) -> str | None:
        body = {"model": "fake-model", "input": f"hi [[slow:{2 * index + 1}]]", "store": False}
        async with session.post(url + "/v1/responses", json=body) as response:
            answer = await response.json()
            return None if response.status == 200 else str(answer["error"]["message"])

    answers = await asyncio.gather(*[one(index) for index in range(BURST)])
    return [answer for answer in answers if answer is not None]


async def test_bursts_after_idle_time_do_not_fail(short_keep_alive: RunningGateway) -> None:
    failures: list[str] = []
    async with aiohttp.ClientSession() as session:
        failures += await burst(session, short_keep_alive.url)
        for gap in GAPS:
            await asyncio.sleep(gap)  # idle time is the point here, not a wait for an event
            failures += await burst(session, short_keep_alive.url)
    assert failures == []
    retried = short_keep_alive.log.read_text().count("retrying on a fresh one")
    assert retried > 0, "no pooled connection went stale: the test did not exercise the race"
