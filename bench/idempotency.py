"""``python -m bench.idempotency``: what an ``Idempotency-Key`` adds to a request.

The work a keyed request does on top of an unkeyed one: digest its body, claim its key
before running, store its answer after (:mod:`stateway.core.exactly_once`), measured
per request over ``--requests`` requests with distinct keys, one at a time, for the
in-process adapter and, with ``--redis URL``, for the Redis one (loopback). Also the
cost of a retry (a key already answered). The issue's targets: at most 0.2 ms per
request in process, at most 1 ms with Redis.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

from stateway.coordination import MemoryCommandResults
from stateway.coordination.redis import RedisCommandResults, connect
from stateway.core.coordination import CommandKey, CommandResults
from stateway.core.exactly_once import attempt, fingerprint

BODY = b'{"model": "fake-model", "input": "' + b"x" * 1000 + b'"}'
ANSWER = b'{"id": "resp_1", "object": "response", "output": []}' + b" " * 2000


async def keyed_request(results: CommandResults, key: CommandKey) -> None:
    digest = fingerprint(b"POST", b"/v1/responses", BODY)
    async with attempt(results, key, digest, param="Idempotency-Key") as once:
        if once.outcome is None:
            once.remember(ANSWER)


async def per_request_ms(results: CommandResults, requests: int, *, retry: bool) -> list[float]:
    run = uuid.uuid4().hex
    keys = [CommandKey("default", "anonymous", f"{run}-{n}") for n in range(requests)]
    if retry:
        for key in keys:
            await keyed_request(results, key)
    samples = []
    for key in keys:
        start = time.perf_counter()
        await keyed_request(results, key)
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def summary(name: str, samples: list[float], target: float) -> str:
    ordered = sorted(samples)
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    verdict = "ok" if p50 <= target else "OVER TARGET"
    return f"{name:<28} p50 {p50:.4f} ms  p99 {p99:.4f} ms  (target {target} ms: {verdict})"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--redis", help="e.g. redis://127.0.0.1:6379/0 (a fresh key prefix)")
    args = parser.parse_args()
    adapters: list[tuple[str, CommandResults, float]] = [
        ("in process", MemoryCommandResults(), 0.2)
    ]
    if args.redis:
        client = connect(args.redis)
        results = RedisCommandResults(client, f"bench:{uuid.uuid4().hex}:", result_ttl=60)
        adapters.append(("redis", results, 1.0))
    for name, results, target in adapters:
        fresh = await per_request_ms(results, args.requests, retry=False)
        retried = await per_request_ms(results, args.requests, retry=True)
        print(summary(f"{name}: first request", fresh, target))
        print(summary(f"{name}: retry", retried, target))
        await results.aclose()


if __name__ == "__main__":
    asyncio.run(main())
