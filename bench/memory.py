"""Memory: the gateway's resident set before and after many requests (store:true, mixed).

A fresh gateway process is read at start, after a warm-up, and after the measured
requests (half non-stream, half stream, from a few concurrent keep-alive connections).
The growth that counts is from after the warm-up, once imports, pools and caches have
settled; the growth from start is recorded too.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import uvloop

from bench.client import Connection
from bench.procfs import rss_mib
from bench.scenarios import Scenario, check_answer


@dataclass(frozen=True, slots=True)
class MemoryStats:
    """RSS readings of the gateway process, MiB."""

    requests: int
    errors: int
    seconds: float
    rss_start_mib: float
    rss_after_warmup_mib: float
    rss_after_mib: float
    peak_rss_mib: float

    @property
    def growth_mib(self) -> float:
        return round(self.rss_after_mib - self.rss_after_warmup_mib, 2)

    @property
    def growth_from_start_mib(self) -> float:
        return round(self.rss_after_mib - self.rss_start_mib, 2)


def measure_memory(
    pid: int, scenarios: list[Scenario], *, requests: int, warmup: int, concurrency: int = 8
) -> MemoryStats:
    """Alternate ``scenarios`` over ``requests`` requests; read ``pid``'s RSS around them."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_measure(pid, scenarios, requests, warmup, concurrency))


async def _measure(
    pid: int, scenarios: list[Scenario], requests: int, warmup: int, concurrency: int
) -> MemoryStats:
    start = rss_mib(pid)
    for s in scenarios:
        probe = Connection(s.url, s.body)
        timing = await probe.send(keep_body=True)
        check_answer(s, timing.status, probe.last_body())
        probe.close()
    await _drive(scenarios, warmup, concurrency)
    await asyncio.sleep(0.5)
    after_warmup = rss_mib(pid)
    began = time.monotonic()
    errors = await _drive(scenarios, requests, concurrency)
    seconds = time.monotonic() - began
    await asyncio.sleep(1.0)
    return MemoryStats(
        requests=requests,
        errors=errors,
        seconds=round(seconds, 2),
        rss_start_mib=round(start, 2),
        rss_after_warmup_mib=round(after_warmup, 2),
        rss_after_mib=round(rss_mib(pid), 2),
        peak_rss_mib=round(rss_mib(pid, "VmHWM"), 2),
    )


async def _drive(scenarios: list[Scenario], requests: int, concurrency: int) -> int:
    """Send ``requests`` requests over ``concurrency`` connections; count the non-200s."""
    first = scenarios[0]
    builder = Connection(first.url, first.body)
    wire = [builder.build_request(s.path, s.body) for s in scenarios]
    counter = iter(range(requests))
    errors = 0

    async def worker() -> None:
        nonlocal errors
        connection = Connection(first.url, first.body)
        try:
            for i in counter:
                timing = await connection.send(wire[i % len(wire)])
                errors += timing.status != 200
        finally:
            connection.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return errors
