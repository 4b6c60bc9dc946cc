"""``python -m bench.replicas``: the throughput of two replicas against one.

A closed loop of ``--concurrency`` clients (default 64), each sending ``store: true``
creates (not streamed; a ``[[words:16]]`` answer from the fake model, at once) one after
another for ``--duration`` seconds: first to one gateway, then to two gateways sharing the
PostgreSQL database (``--database``) and Redis (``--redis``), behind a simple balancer:
the load generator's own round robin, each client pinned to one replica (so the balancer
costs nothing that would have to be subtracted). Throughput is completed requests a
second. The issue's target: two replicas give at least 1.7 times one replica's throughput
at c=64, on a machine with the cores for both (recorded with the CPU count: on two cores
shared with the load generator and the fake model, two replicas cannot double anything).

So each run also reports the replicas' efficiency: requests completed per CPU-second the
gateway processes spent (from /proc). Two replicas scale by ``2 x`` their efficiency over
one replica's when each has a core of its own; what they lose to sharing the database,
Redis and the coordination between them shows as lower efficiency. On a machine without
the cores this projection is the measurement that can be made (contention for the shared
cores lowers the two-replica efficiency too, so it errs low).

``--quick`` is a smoke run (c=8 for 2 seconds); every run checks that each request
completed and that each replica served some.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import aiohttp
import orjson

from bench import processes, procfs
from bench.processes import Server
from stateway.launch import GATEWAY_ANNOUNCEMENT

BODY = orjson.dumps({"model": "fake-model", "input": "[[words:16]]", "store": True})


async def client(url: str, until: float, served: list[int]) -> None:
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(url) as http:
        while time.monotonic() < until:
            async with http.post("/v1/responses", data=BODY, headers=headers) as reply:
                answer = await reply.read()
            if reply.status != 200 or orjson.loads(answer)["status"] != "completed":
                raise RuntimeError(f"{url} answered {reply.status}: {answer[:200]!r}")
            served.append(1)


async def throughput(urls: list[str], concurrency: int, duration: float) -> tuple[float, list[int]]:
    """Requests a second over ``urls`` (client n on ``urls[n % len(urls)]``), and how
    many each URL served."""
    until = time.monotonic() + duration
    served: list[list[int]] = [[] for _ in urls]
    began = time.monotonic()
    await asyncio.gather(
        *(client(urls[n % len(urls)], until, served[n % len(urls)]) for n in range(concurrency))
    )
    spent = time.monotonic() - began
    counts = [len(s) for s in served]
    return sum(counts) / spent, counts


@contextmanager
def gateways(
    count: int, upstream: str, database: str, redis: str, work: Path
) -> Iterator[list[Server]]:
    env = {"STATEWAY_REDIS_URL": redis, "STATEWAY_REDIS_KEY_PREFIX": f"bench{uuid.uuid4().hex}:"}
    command = [sys.executable, "-m", "stateway", "serve", "--port", "0"]
    command += ["--upstream", upstream, "--upstream-api", "chat", "--database", database]
    with ExitStack() as stack:
        yield [
            stack.enter_context(
                processes.start_server(f"replica{n}", command, GATEWAY_ANNOUNCEMENT, work, env=env)
            )
            for n in range(count)
        ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.replicas", description=__doc__)
    parser.add_argument("--database", required=True, help="a PostgreSQL URL both replicas share")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--quick", action="store_true", help="a smoke run: c=8 for 2 s")
    args = parser.parse_args(argv)
    concurrency, duration = (8, 2.0) if args.quick else (args.concurrency, args.duration)
    results: dict[int, float] = {}
    efficiency: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="stateway-bench-") as tmp:
        work = Path(tmp)
        with processes.fake_upstream(work) as fake:
            for count in (1, 2):
                with gateways(count, fake.url, args.database, args.redis, work) as servers:
                    urls = [server.url for server in servers]
                    asyncio.run(throughput(urls, concurrency, min(duration, 2.0)))  # warm up
                    before = sum(procfs.cpu_seconds(server.pid) for server in servers)
                    began = time.monotonic()
                    rate, served = asyncio.run(throughput(urls, concurrency, duration))
                    spent = time.monotonic() - began
                    cpu = sum(procfs.cpu_seconds(server.pid) for server in servers) - before
                if min(served) == 0:
                    raise RuntimeError(f"a replica served nothing: {served}")
                results[count] = rate
                efficiency[count] = rate * spent / cpu
    cpus = os.cpu_count()
    print(
        f"| replicas | requests/s (c={concurrency}, {duration:g} s, {cpus} CPUs) "
        "| requests per gateway CPU-second |"
    )
    print("|---|---|---|")
    for count, rate in results.items():
        print(f"| {count} | {rate:.0f} | {efficiency[count]:.0f} |")
    print(f"two replicas: {results[2] / results[1]:.2f}x one (target: at least 1.7x)")
    projected = 2 * efficiency[2] / efficiency[1]
    print(f"with a core per replica: {projected:.2f}x one (two replicas' efficiency over one's)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
