"""``python -m bench.metrics``: what observability adds to a request, in process.

Three costs, each per request over ``--requests`` requests, one at a time:

- the HTTP wrapper (:class:`~stateway.surfaces.http.observed.ObservedApp`: a request id,
  its header, the route template, the request's counter and histogram) around a trivial
  ASGI app, against the bare app;
- a run's report (tokens by model and tenant, one attempt, time to first token);
- the timed response store (:class:`~stateway.telemetry.storage.TimedStore`) around a
  store that answers at once, for one operation.

The issue's target: metrics add at most 0.05 ms per request (the sum of the three, with
a run doing two storage operations). Tracing is off here, as by default.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.types import Message, Receive, Scope, Send

from stateway.core.telemetry import RunReport
from stateway.core.usage import Usage
from stateway.surfaces.http.observed import ObservedApp
from stateway.telemetry.metrics import PrometheusMetrics
from stateway.telemetry.observability import Observability
from stateway.telemetry.storage import TimedStore

TARGET_MS = 0.05

SCOPE: dict[str, Any] = {"type": "http", "method": "POST", "path": "/v1/responses", "headers": []}


class Route:
    path = "/v1/responses"


async def bare(scope: Scope, receive: Receive, send: Send) -> None:
    scope["route"] = Route
    await send({"type": "http.response.start", "status": 200, "headers": [(b"a", b"b")]})
    await send({"type": "http.response.body", "body": b"{}", "more_body": False})


async def receive() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


async def send(message: Message) -> None:
    return None


class InstantStore:
    async def get(self, tenant_id: str, response_id: str) -> None:
        return None


async def per_call_ms(call: Callable[[], Awaitable[None]], requests: int) -> float:
    """The median of ``requests`` calls, in milliseconds (after a warm-up)."""
    for _ in range(min(requests, 1000)):
        await call()
    samples = []
    for _ in range(requests):
        start = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=20_000)
    args = parser.parse_args()
    observability = Observability(PrometheusMetrics())
    observed = ObservedApp(bare, observability)
    report = RunReport(
        "default", "fake-model", Usage(120, 40), [{"backend": "b", "outcome": "ok"}], 0.02
    )
    timed = TimedStore(InstantStore(), observability.metrics.storage_observed)  # type: ignore[arg-type]
    plain = InstantStore()

    async def run_ended() -> None:
        observability.run_ended(report)

    bare_ms = await per_call_ms(lambda: bare(dict(SCOPE), receive, send), args.requests)
    observed_ms = await per_call_ms(lambda: observed(dict(SCOPE), receive, send), args.requests)
    report_ms = await per_call_ms(run_ended, args.requests)
    plain_ms = await per_call_ms(lambda: plain.get("t", "r"), args.requests)
    timed_ms = await per_call_ms(lambda: timed.get("t", "r"), args.requests)
    http = observed_ms - bare_ms
    storage = timed_ms - plain_ms
    total = http + report_ms + 2 * storage
    verdict = "ok" if total <= TARGET_MS else "OVER TARGET"
    print(f"{'HTTP wrapper (observed - bare)':<36} {http:.4f} ms")
    print(f"{'run report':<36} {report_ms:.4f} ms")
    print(f"{'timed storage operation':<36} {storage:.4f} ms")
    name = "per request (wrapper+report+2 ops)"
    print(f"{name:<36} {total:.4f} ms  (target {TARGET_MS} ms: {verdict})")


if __name__ == "__main__":
    asyncio.run(main())
