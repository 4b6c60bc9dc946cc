"""Bursts after idle time against an upstream with a 1 s keep-alive: pooled connections
the upstream closes just as they are reused are retried on fresh ones, so no request fails.

Each burst's requests finish over ~100 ms (``[[slow:N]]``), so at the next burst some
pooled connections are always about to reach the upstream's keep-alive. Without the retry
about one request in ten failed here with "connection to model server failed"."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import pytest

from stateway.fake_upstream.launch import fake_upstream_command
from stateway.fake_upstream.server import ANNOUNCEMENT
from stateway.launch import Launched, launch
from tests.e2e.configured import RunningGateway, configured_gateway

BURST = 50
GAPS = [0.88, 0.9, 0.92, 0.88, 0.9, 0.92]
"""Idle seconds between bursts: just under the upstream's keep-alive."""


@dataclass(frozen=True, slots=True)
class StaleSetup:
    gateway: RunningGateway
    upstream: Launched
    upstream_log: Path

    def diagnosis(self) -> str:
        """What the upstream's side looked like, for a failure's message: whether it runs,
        its listening socket's queue (``ss``: Recv-Q is connections not yet accepted), its
        open files and its log's end, and the gateway log's end."""
        pid, port = self.upstream.pid, urlsplit(self.upstream.url).port
        listening = subprocess.run(
            ["ss", "-ltn", f"sport = :{port}"], capture_output=True, text=True, check=False
        ).stdout
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split()[2]
            files = str(len(list(Path(f"/proc/{pid}/fd").iterdir())))
        except OSError:
            state = files = "gone"
        return (
            f"upstream pid {pid} state {state}, open files {files}\n{listening}\n"
            f"upstream log:\n{self.upstream_log.read_text()[-3000:]}\n"
            f"gateway log:\n{self.gateway.log.read_text()[-3000:]}"
        )


@pytest.fixture(scope="module")
def short_keep_alive(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StaleSetup]:
    directory = tmp_path_factory.mktemp("stale")
    upstream_log = directory / "upstream.log"
    with (
        upstream_log.open("w") as stderr,
        launch(fake_upstream_command(keep_alive=1), ANNOUNCEMENT, stderr=stderr) as upstream,
        configured_gateway(directory, {"url": upstream.url}) as gateway,  # pool idle 4 s
    ):
        yield StaleSetup(gateway, upstream, upstream_log)


async def burst(session: aiohttp.ClientSession, url: str) -> list[str]:
    """One burst; the error messages of the requests that failed."""

    async def one(index: int) -> str | None:
        body = {"model": "fake-model", "input": f"hi [[slow:{2 * index + 1}]]", "store": False}
        async with session.post(url + "/v1/responses", json=body) as response:
            answer = await response.json()
            return None if response.status == 200 else str(answer["error"]["message"])

    answers = await asyncio.gather(*[one(index) for index in range(BURST)])
    return [answer for answer in answers if answer is not None]


async def test_bursts_after_idle_time_do_not_fail(short_keep_alive: StaleSetup) -> None:
    url = short_keep_alive.gateway.url
    failures: list[str] = []
    async with aiohttp.ClientSession() as session:
        failures += await burst(session, url)
        for gap in GAPS:
            await asyncio.sleep(gap)  # idle time is the point here, not a wait for an event
            failures += await burst(session, url)
    assert failures == [], short_keep_alive.diagnosis()
    retried = short_keep_alive.gateway.log.read_text().count("retrying on a fresh one")
    assert retried > 0, "no pooled connection went stale: the test did not exercise the race"
