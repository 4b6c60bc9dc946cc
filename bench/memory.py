"""Memory: the gateway's resident set before and after many requests (store:true, mixed).

A fresh gateway process is read at start, after a warm-up, and after the measured
requests (half non-stream, half stream, from a few concurrent keep-alive connections).
The growth that counts is from after the warm-up, once imports, pools and caches have
settled; the growth from start is recorded too.

The same is measured with half the clients leaving mid-stream (each closes its
connection at its first text delta, so the gateway cancels the run and its upstream
call): a run kept alive by a reference cycle would show here as growth.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace

import uvloop

from bench.client import Connection
from bench.procfs import rss_mib
from bench.scenarios import Scenario, check_answer, responses_body


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
    left: int = 0
    """Requests whose client left mid-stream."""
    connections: int = 8

    @property
    def growth_mib(self) -> float:
        return round(self.rss_after_mib - self.rss_after_warmup_mib, 2)

    @property
    def growth_from_start_mib(self) -> float:
        return round(self.rss_after_mib - self.rss_start_mib, 2)


LEAVE_AT = b"response.output_text.delta"
"""A leaving client closes its connection at the first frame holding this."""
LEAVING_INPUT = "[[slow:2]] [[words:40]] hello"
"""What a leaving client asks for: a stream long enough to leave in the middle of."""


@dataclass(frozen=True, slots=True)
class Plan:
    """One kind of request in the mix: the scenario, and whether its client leaves."""

    scenario: Scenario
    leave: bool = False


def measure_memory(
    pid: int, scenarios: list[Scenario], *, requests: int, warmup: int, concurrency: int = 8
) -> MemoryStats:
    """Alternate ``scenarios`` over ``requests`` requests; read ``pid``'s RSS around them."""
    plans = [Plan(s) for s in scenarios]
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_measure(pid, plans, requests, warmup, concurrency))


def measure_memory_with_disconnects(
    pid: int, scenarios: list[Scenario], *, requests: int, warmup: int, concurrency: int = 100
) -> MemoryStats:
    """Like :func:`measure_memory`, but every other request is a stream whose client
    leaves at its first text delta; the others alternate ``scenarios``. More connections
    by default: bursts of runs ending together are what left garbage behind."""
    stream = next(s for s in scenarios if s.stream)
    leaving = replace(stream, body=responses_body(True, store=True, text=LEAVING_INPUT))
    plans = [
        Plan(leaving, leave=True) if i % 2 == 0 else Plan(scenarios[i // 2 % len(scenarios)])
        for i in range(2 * len(scenarios))
    ]
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_measure(pid, plans, requests, warmup, concurrency))


async def _measure(
    pid: int, plans: list[Plan], requests: int, warmup: int, concurrency: int
) -> MemoryStats:
    start = rss_mib(pid)
    for plan in plans:
        if plan.leave:
            continue
        s = plan.scenario
        probe = Connection(s.url, s.body)
        timing = await probe.send(keep_body=True)
        check_answer(s, timing.status, probe.last_body())
        probe.close()
    await _drive(plans, warmup, concurrency)
    await asyncio.sleep(0.5)
    after_warmup = rss_mib(pid)
    began = time.monotonic()
    errors, left = await _drive(plans, requests, concurrency)
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
        left=left,
        connections=concurrency,
    )


async def _drive(plans: list[Plan], requests: int, concurrency: int) -> tuple[int, int]:
    """Send ``requests`` requests over ``concurrency`` connections, cycling through
    ``plans``; count the non-200s and the clients that left."""
    first = plans[0].scenario
    builder = Connection(first.url, first.body)
    wire = [builder.build_request(p.scenario.path, p.scenario.body) for p in plans]
    leave = [LEAVE_AT if p.leave else None for p in plans]
    counter = iter(range(requests))
    errors = left = 0

    async def worker() -> None:
        nonlocal errors, left
        connection = Connection(first.url, first.body)
        try:
            for i in counter:
                timing = await connection.send(wire[i % len(wire)], leave_at=leave[i % len(wire)])
                errors += timing.status != 200
                left += timing.left
        finally:
            connection.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return errors, left
