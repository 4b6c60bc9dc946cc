"""``python -m bench.large_body``: does a huge request body stall other requests?

A fresh gateway (default settings: 32 MiB bodies, 10,000 input items) receives one large
``POST /v1/responses`` at a time while a prober sends ``GET /health`` on its own
connection, one after the other; the slowest ``/health`` answer during the POST is what
counts (the issue's target: under 1 s). Bodies:

- ``400k items``: the probe's 23.5 MB body of 400,000 small messages (refused by count);
- ``10k items, many parts``: 10,000 messages at the item limit, 40 text parts each
  (~21 MB, accepted: decoded, stored, sent upstream);
- ``one long text``: a single 25 MB string input (accepted).

Every loop is bounded: each POST has a timeout, the prober stops when the POST ends.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench import processes

MODEL = "fake-model"
PROBE_INTERVAL = 0.02
POST_TIMEOUT = 300.0


@dataclass(frozen=True, slots=True)
class Probe:
    """One large POST and the ``/health`` answers measured while it ran."""

    name: str
    body_mb: float
    status: int
    post_seconds: float
    health_count: int
    health_max_ms: float
    health_p50_ms: float


def bodies() -> dict[str, bytes]:
    many = [{"role": "user", "content": f"message number {i:012d}"} for i in range(400_000)]
    parts = [{"type": "input_text", "text": "x" * 20} for _ in range(40)]
    at_limit = [{"role": "user", "content": parts} for _ in range(10_000)]
    return {
        "400k items": orjson.dumps({"model": MODEL, "input": many}),
        "10k items, many parts": orjson.dumps({"model": MODEL, "input": at_limit}),
        "one long text": orjson.dumps({"model": MODEL, "input": "word " * 5_000_000}),
    }


async def probe(base_url: str, name: str, body: bytes) -> Probe:
    timeout = aiohttp.ClientTimeout(total=POST_TIMEOUT)
    async with aiohttp.ClientSession(timeout=timeout) as poster, aiohttp.ClientSession() as prober:
        async with prober.get(base_url + "/health") as warm:
            await warm.read()
        began = time.monotonic()
        post = asyncio.create_task(_post(poster, base_url, body))
        latencies: list[float] = []
        while not post.done() and time.monotonic() - began < POST_TIMEOUT:
            sent = time.monotonic()
            async with prober.get(base_url + "/health") as answer:
                await answer.read()
            latencies.append(time.monotonic() - sent)
            await asyncio.wait([post], timeout=PROBE_INTERVAL)
        status = await post
        seconds = time.monotonic() - began
    latencies.sort()
    return Probe(
        name=name,
        body_mb=round(len(body) / 1e6, 1),
        status=status,
        post_seconds=round(seconds, 2),
        health_count=len(latencies),
        health_max_ms=round(latencies[-1] * 1000, 1) if latencies else 0.0,
        health_p50_ms=round(latencies[len(latencies) // 2] * 1000, 1) if latencies else 0.0,
    )


async def _post(session: aiohttp.ClientSession, base_url: str, body: bytes) -> int:
    headers = {"Content-Type": "application/json"}
    async with session.post(base_url + "/v1/responses", data=body, headers=headers) as answer:
        await answer.read()
        return answer.status


async def measure(base_url: str) -> list[Probe]:
    return [await probe(base_url, name, body) for name, body in bodies().items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.large_body", description=__doc__)
    parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="stateway-bench-") as tmp:
        work = Path(tmp)
        with (
            processes.fake_upstream(work) as fake,
            processes.gateway("gateway-large-body", fake.url, work / "large.db", work) as gw,
        ):
            results = asyncio.run(measure(gw.url))
    rows: list[dict[str, Any]] = [
        {field: getattr(r, field) for field in Probe.__dataclass_fields__} for r in results
    ]
    header = "| body | MB | status | POST s | /health probes | /health max ms | p50 ms |"
    print(header)
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(str(value) for value in row.values()) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
