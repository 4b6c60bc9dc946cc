"""Latency at concurrency 1: sequential requests from one keep-alive connection per target.

Every scenario is first checked (one request whose body must be the right answer) and
warmed up; the measured requests are then taken in rounds, the scenarios' order rotated
each round, so that a burst of background load on the machine is shared by all targets
rather than landing on one of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import uvloop

from bench.client import Connection
from bench.scenarios import Scenario, check_answer
from bench.stats import ms, percentile


@dataclass(frozen=True, slots=True)
class LatencyStats:
    """Per-scenario results at c=1, in milliseconds."""

    count: int
    errors: int
    median_ms: float
    p99_ms: float
    mean_ms: float
    ttfb_median_ms: float
    ttfb_p99_ms: float


def measure_latency(
    scenarios: Sequence[Scenario], *, requests: int, warmup: int, rounds: int = 5
) -> dict[str, LatencyStats]:
    """``requests`` measured requests per scenario after ``warmup`` unmeasured ones."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_measure(scenarios, requests, warmup, rounds))


async def _measure(
    scenarios: Sequence[Scenario], requests: int, warmup: int, rounds: int
) -> dict[str, LatencyStats]:
    connections = {s.key: Connection(s.url, s.body) for s in scenarios}
    totals: dict[str, list[int]] = {s.key: [] for s in scenarios}
    firsts: dict[str, list[int]] = {s.key: [] for s in scenarios}
    errors = dict.fromkeys(totals, 0)
    try:
        for s in scenarios:
            connection = connections[s.key]
            timing = await connection.send(keep_body=True)
            check_answer(s, timing.status, connection.last_body())
            for _ in range(warmup):
                await connection.send()
        per_round = [
            requests // rounds + (1 if r < requests % rounds else 0) for r in range(rounds)
        ]
        for r, count in enumerate(per_round):
            order = [*scenarios[r % len(scenarios) :], *scenarios[: r % len(scenarios)]]
            for s in order:
                connection = connections[s.key]
                for _ in range(count):
                    timing = await connection.send()
                    if timing.status != 200:
                        errors[s.key] += 1
                        continue
                    totals[s.key].append(timing.total_ns)
                    firsts[s.key].append(timing.first_byte_ns)
    finally:
        for connection in connections.values():
            connection.close()
    return {key: _stats(totals[key], firsts[key], errors[key]) for key in totals}


def _stats(totals: list[int], firsts: list[int], errors: int) -> LatencyStats:
    totals.sort()
    firsts.sort()
    mean = sum(totals) / len(totals) if totals else float("nan")
    return LatencyStats(
        count=len(totals),
        errors=errors,
        median_ms=ms(percentile(totals, 50)),
        p99_ms=ms(percentile(totals, 99)),
        mean_ms=ms(mean),
        ttfb_median_ms=ms(percentile(firsts, 50)),
        ttfb_p99_ms=ms(percentile(firsts, 99)),
    )
