"""``python -m bench.pacing``: what each streamed chunk costs at a model's own pace.

``make bench`` streams answers that the fake sends all at once, so the gateway reads and
writes them in a few batches and its cost is mostly per request. A model server sends a
token every few tens of milliseconds instead, and then every chunk is a wake-up of its
own: read from the upstream, (for a translating frontend) parsed, assembled, encoded,
written. This measures that case: ``--streams`` concurrent streams, each of ``--words``
words that the fake paces ``--pace`` ms apart (``[[slow:MS]] [[words:N]]``), through

- **floor**: the bare pass-through hop (:mod:`bench.passthrough`), Chat Completions;
- **responses**: the gateway (store:false, chat backend), ``POST /v1/responses``;
- **chat**: the same gateway's Chat Completions fast path;
- **messages**: the same gateway's Anthropic Messages frontend.

For each it reports the hop's CPU time (user and system, from ``/proc``) per streamed
SSE ``data:`` line the client received, and what that means as lines per second per core
(how many concurrent token streams one process carries). Targets are run alternately, in
``--rounds`` rounds, and the median round is reported, so a drift in the machine's load
hits every target alike. ``--quick`` is a smoke run.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from bench import processes
from bench.procfs import cpu_times

MODEL = "fake-model"


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    path: str
    body: dict[str, Any]


def targets(text: str) -> list[Target]:
    chat = {"model": MODEL, "messages": [{"role": "user", "content": text}], "stream": True}
    return [
        Target("floor", "/v1/chat/completions", chat),
        Target(
            "responses",
            "/v1/responses",
            {"model": MODEL, "input": text, "stream": True, "store": False},
        ),
        Target("chat", "/v1/chat/completions", chat),
        Target(
            "messages",
            "/v1/messages",
            {
                "model": MODEL,
                "max_tokens": 1024,
                "stream": True,
                "messages": [{"role": "user", "content": text}],
            },
        ),
    ]


async def stream_lines(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> int:
    lines = 0
    async with session.post(url, json=body) as reply:
        reply.raise_for_status()
        async for line in reply.content:
            if line.startswith(b"data:"):
                lines += 1
    return lines


@dataclass(frozen=True, slots=True)
class Round:
    lines: int
    user_s: float
    system_s: float

    @property
    def cpu_us_per_line(self) -> float:
        return (self.user_s + self.system_s) * 1e6 / self.lines

    @property
    def system_us_per_line(self) -> float:
        return self.system_s * 1e6 / self.lines


async def one_round(url: str, pid: int, target: Target, streams: int) -> Round:
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        await stream_lines(session, url + target.path, target.body)  # a warm connection
        user, system = cpu_times(pid)
        counts = await asyncio.gather(
            *(stream_lines(session, url + target.path, target.body) for _ in range(streams))
        )
        user_after, system_after = cpu_times(pid)
    return Round(sum(counts), user_after - user, system_after - system)


async def measure(
    servers: dict[str, processes.Server], text: str, streams: int, rounds: int
) -> dict[str, list[Round]]:
    results: dict[str, list[Round]] = {}
    plan = targets(text)
    for _ in range(rounds):
        for target in plan:
            server = servers[target.name]
            result = await one_round(server.url, server.pid, target, streams)
            results.setdefault(target.name, []).append(result)
    return results


def report(results: dict[str, list[Round]], streams: int, words: int, pace: int) -> None:
    print(
        f"\n{streams} concurrent streams of {words} words, {pace} ms apart "
        f"(median of {len(next(iter(results.values())))} rounds)\n"
    )
    print(
        "| target | data lines / stream | hop CPU µs / line | of which system | "
        "x floor | lines/s per core |"
    )
    print("|---|--:|--:|--:|--:|--:|")
    floor = statistics.median(r.cpu_us_per_line for r in results["floor"])
    for name, rounds in results.items():
        cost = statistics.median(r.cpu_us_per_line for r in rounds)
        system = statistics.median(r.system_us_per_line for r in rounds)
        lines = statistics.median(r.lines for r in rounds) / streams
        print(
            f"| {name} | {lines:.0f} | {cost:.1f} | {system:.1f} | {cost / floor:.2f} | "
            f"{1e6 / cost:,.0f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--words", type=int, default=100)
    parser.add_argument("--pace", type=int, default=20, help="ms between chunks")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    args = parser.parse_args()
    if args.quick:
        args.streams, args.words, args.rounds = 8, 10, 1
    text = f"[[slow:{args.pace}]] [[words:{args.words}]] hello"
    with tempfile.TemporaryDirectory() as directory:
        logs = Path(directory)
        with (
            processes.fake_upstream(logs) as fake,
            processes.passthrough(fake.url, logs) as floor,
            processes.gateway("gateway", fake.url, logs / "stateway.db", logs) as gateway,
        ):
            servers = {"floor": floor, "responses": gateway, "chat": gateway, "messages": gateway}
            results = asyncio.run(measure(servers, text, args.streams, args.rounds))
    report(results, args.streams, args.words, args.pace)


if __name__ == "__main__":
    main()
