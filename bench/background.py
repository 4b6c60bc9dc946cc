"""``python -m bench.background``: what a background run's persisted event log costs.

Two numbers, against the fake model answering at once (the gateway's work is then all
there is to measure, the worst case for the log's share):

- **persistence overhead**: the wall time of a run of ``--events`` stream events (a
  ``[[words]]`` answer) created with ``background: true, stream: true`` and read to its
  end, against the same run created ``store: true, stream: true`` without background.
  Medians over ``--runs`` of each, taken alternately. The issue's target: at most 10 %.
- **resume latency**: on a finished background run of that length, the time from sending
  ``GET /v1/responses/{id}?stream=true&starting_after=<middle>`` to the first byte of the
  first replayed event, and to the end of the replay. The issue's target: the first byte
  within 50 ms.

One request at a time, everything on loopback; SQLite by default (``--database`` takes a
PostgreSQL URL too).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import aiohttp
import orjson

from bench import processes

MODEL = "fake-model"
FRAMING_EVENTS = 8
"""Events of a one-message answer besides its text deltas: created, in_progress, item
added, part added, text done, part done, item done, completed."""


def body(events: int, *, background: bool) -> bytes:
    words = max(1, events - FRAMING_EVENTS)
    fields = {"background": True} if background else {"store": True}
    return orjson.dumps({"model": MODEL, "input": f"[[words:{words}]]", "stream": True, **fields})


async def read_stream(reply: aiohttp.ClientResponse) -> tuple[int, float | None, str]:
    """Events read to the end, when the first byte came, and the last event's type."""
    first = None
    count = 0
    last = b""
    async for line in reply.content:
        if first is None:
            first = time.perf_counter()
        if line.startswith(b"data: "):
            count += 1
            last = line
    kind = orjson.loads(last[6:])["type"] if last else ""
    return count, first, kind


async def one_run(http: aiohttp.ClientSession, payload: bytes) -> tuple[float, str, int]:
    """Wall time of one streamed run, its response id and its event count."""
    headers = {"Content-Type": "application/json"}
    began = time.perf_counter()
    async with http.post("/v1/responses", data=payload, headers=headers) as reply:
        response_id = ""
        count = 0
        kind = ""
        async for line in reply.content:
            if line.startswith(b"data: "):
                count += 1
                if not response_id:
                    response_id = orjson.loads(line[6:])["response"]["id"]
                kind = orjson.loads(line[6:])["type"] if b"response.completed" in line else kind
    spent = time.perf_counter() - began
    if kind != "response.completed":
        raise RuntimeError(f"the run did not complete ({count} events)")
    return spent, response_id, count


async def overhead(base_url: str, events: int, runs: int, warmup: int) -> dict[str, list[float]]:
    payloads = {
        "store:true": body(events, background=False),
        "background": body(events, background=True),
    }
    times: dict[str, list[float]] = {name: [] for name in payloads}
    async with aiohttp.ClientSession(base_url) as http:
        for _ in range(warmup):
            for payload in payloads.values():
                await one_run(http, payload)
        for n in range(runs):
            order = list(payloads.items()) if n % 2 == 0 else list(payloads.items())[::-1]
            for name, payload in order:
                spent, _, count = await one_run(http, payload)
                if count != events:
                    raise RuntimeError(f"{name}: {count} events, not {events}")
                times[name].append(spent)
    return times


async def resume(base_url: str, events: int, runs: int) -> tuple[list[float], list[float]]:
    """First-byte and whole-replay times of resuming a finished run from its middle."""
    firsts: list[float] = []
    wholes: list[float] = []
    async with aiohttp.ClientSession(base_url) as http:
        _, response_id, _ = await one_run(http, body(events, background=True))
        middle = events // 2
        path = f"/v1/responses/{response_id}?stream=true&starting_after={middle}"
        for _ in range(runs + 3):  # the first three warm the statement caches
            began = time.perf_counter()
            async with http.get(path) as reply:
                count, first, kind = await read_stream(reply)
            ended = time.perf_counter()
            if (count, kind) != (events - middle - 1, "response.completed") or first is None:
                raise RuntimeError(f"the replay sent {count} events ending {kind!r}")
            firsts.append(first - began)
            wholes.append(ended - began)
    return firsts[3:], wholes[3:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.background", description=__doc__)
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--database", help="a database URL (default: a fresh SQLite file)")
    args = parser.parse_args(argv)
    with processes.gateway_on_fake(args.database) as gw:
        times = asyncio.run(overhead(gw.url, args.events, args.runs, args.warmup))
        firsts, wholes = asyncio.run(resume(gw.url, args.events, args.runs))
    medians = {name: statistics.median(spent) * 1000 for name, spent in times.items()}
    print(f"| run of {args.events} events | median ms ({args.runs} runs) | p90 ms |")
    print("|---|---|---|")
    for name, spent in times.items():
        p90 = statistics.quantiles(spent, n=10)[-1] * 1000
        print(f"| {name} | {medians[name]:.1f} | {p90:.1f} |")
    added = (medians["background"] / medians["store:true"] - 1) * 100
    print(f"event log persistence adds {added:+.1f} % wall time (target: at most +10 %)")
    first = statistics.median(firsts) * 1000
    whole = statistics.median(wholes) * 1000
    print(
        f"resuming after event {args.events // 2} of a finished run: first byte "
        f"{first:.1f} ms, whole replay {whole:.1f} ms (medians; target: first byte within 50 ms)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
