"""``python -m bench.reload``: serving at concurrency 32 while the configuration reloads.

One gateway (``stateway serve --config``, SQLite) in front of one fake model server, its
route ``assistant`` two candidates (two backends on the fake, weighted 1:2). Clients on
``--concurrency`` keep-alive connections send ``stream: true, store: false`` requests
(``[[words:8]]``) back to back and read each stream to its end. Two kinds of phase, of
``--requests`` requests each, alternate for ``--rounds`` rounds, so that drift on the
machine hits both alike:

- **steady**: no reload;
- **reload**: five reloads, one after each sixth of the phase's requests has finished:
  the routes file is rewritten (new upstream model names, the weights swapped, so every
  reload builds new backends and pools) and the gateway gets ``SIGHUP``; each is awaited
  in ``GET /admin/config/status`` before the next. *Reloads under load* counts those
  over before the phase's last request ended (5 of 5 per round is the point).

A request is *dropped* unless it was answered 200 and its stream ended with
``response.completed``. Reported per kind of phase: requests, dropped, p50, p99 and max
latency (request sent to the stream's last byte); then the p99 change (the issue's
target: no dropped request, and p99 moved by less than 20 %).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson

from bench import processes
from bench.stats import percentile
from stateway.launch import GATEWAY_ANNOUNCEMENT

RELOADS = 5
ADMIN_KEY = "bench-reload-admin-key"
BODY = orjson.dumps({"model": "assistant", "input": "[[words:8]]", "stream": True, "store": False})
HEADERS = {"Content-Type": "application/json"}


def routes(generation: int, upstream: str) -> str:
    """The routes file of ``generation``: new upstream model names, weights swapped."""
    weights = (1, 2) if generation % 2 else (2, 1)
    candidates = "".join(
        f'[[routes.candidates]]\nbackend = "{name}"\nmodel = "gen-{generation}-{name}"\n'
        f"weight = {weight}\n"
        for name, weight in zip(("one", "two"), weights, strict=True)
    )
    backends = "".join(f'[[backends]]\nname = "{n}"\nurl = "{upstream}"\n' for n in ("one", "two"))
    return f'{backends}\n[[routes]]\nname = "assistant"\n{candidates}'


@dataclass
class Phase:
    latencies: list[float] = field(default_factory=list)
    dropped: int = 0
    reloads: int = 0
    """Reloads over while requests were still running."""
    late: int = 0
    """Reloads over after the phase's last request (a phase too short)."""


@dataclass
class Reloader:
    """Rewrites the routes file and sends ``SIGHUP``; knows the generation in effect."""

    config: Path
    upstream: str
    pid: int
    generation: int = 1

    async def reload(self, http: aiohttp.ClientSession) -> None:
        self.generation += 1
        self.config.write_text(routes(self.generation, self.upstream))
        os.kill(self.pid, signal.SIGHUP)
        auth = {"Authorization": f"Bearer {ADMIN_KEY}"}
        for _ in range(3000):  # bounded: a reload that never shows is an error
            async with http.get("/admin/config/status", headers=auth) as reply:
                status = orjson.loads(await reply.read())
            if status["generation"] == self.generation:
                return
            if status["last_error"]:
                raise RuntimeError(f"the reload failed: {status['last_error']}")
            await asyncio.sleep(0.01)
        raise RuntimeError(f"generation {self.generation} never showed in the status")


async def one(http: aiohttp.ClientSession) -> float | None:
    """The request's latency, or None when it was dropped."""
    began = time.perf_counter()
    last = b""
    try:
        async with http.post("/v1/responses", data=BODY, headers=HEADERS) as reply:
            if reply.status != 200:
                await reply.read()
                return None
            async for line in reply.content:
                if line.startswith(b"data: "):
                    last = line
    except aiohttp.ClientError:
        return None
    if b'"response.completed"' not in last:
        return None
    return time.perf_counter() - began


async def phase(
    http: aiohttp.ClientSession, requests: int, concurrency: int, reloader: Reloader | None
) -> Phase:
    result = Phase()
    sent = 0
    finished = 0
    progress = asyncio.Condition()

    async def client() -> None:
        nonlocal sent, finished
        while sent < requests:
            sent += 1
            latency = await one(http)
            if latency is None:
                result.dropped += 1
            else:
                result.latencies.append(latency)
            finished += 1
            if reloader is not None:
                async with progress:
                    progress.notify_all()

    async def reloads() -> None:
        assert reloader is not None
        for sixth in range(1, RELOADS + 1):
            due = sixth * requests // (RELOADS + 1)
            async with progress:
                await progress.wait_for(lambda: finished >= due)  # noqa: B023 - awaited here
            await reloader.reload(http)
            if finished < requests:
                result.reloads += 1
            else:
                result.late += 1

    tasks = [asyncio.create_task(client()) for _ in range(concurrency)]
    if reloader is not None:
        tasks.append(asyncio.create_task(reloads()))
    await asyncio.gather(*tasks)
    return result


async def run(base_url: str, reloader: Reloader, args: argparse.Namespace) -> dict[str, Phase]:
    totals = {"steady": Phase(), "reload": Phase()}
    connector = aiohttp.TCPConnector(limit=args.concurrency + 1)
    async with aiohttp.ClientSession(base_url, connector=connector) as http:
        await phase(http, args.warmup, args.concurrency, None)
        for round_ in range(args.rounds):
            order = ["steady", "reload"] if round_ % 2 == 0 else ["reload", "steady"]
            for name in order:
                done = await phase(
                    http, args.requests, args.concurrency, reloader if name == "reload" else None
                )
                total = totals[name]
                total.latencies += done.latencies
                total.dropped += done.dropped
                total.reloads += done.reloads
                total.late += done.late
    return totals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.reload", description=__doc__)
    parser.add_argument("--requests", type=int, default=6000, help="per phase (6000)")
    parser.add_argument("--rounds", type=int, default=3, help="steady+reload rounds (3)")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=1000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="stateway-bench-") as tmp:
        work = Path(tmp)
        with processes.fake_upstream(work) as fake:
            config = work / "stateway.toml"
            config.write_text(routes(1, fake.url))
            command = [sys.executable, "-m", "stateway", "serve", "--port", "0"]
            command += ["--config", str(config), "--database", f"sqlite:///{work / 'gw.db'}"]
            env = {"STATEWAY_ADMIN_KEY": ADMIN_KEY}
            with processes.start_server(
                "gateway", command, GATEWAY_ANNOUNCEMENT, work, env=env
            ) as gateway:
                reloader = Reloader(config, fake.url, gateway.pid)
                totals = asyncio.run(run(gateway.url, reloader, args))
    print(
        f"| phase (c={args.concurrency}, {args.rounds} x {args.requests} streams) | requests "
        "| dropped | reloads under load | p50 ms | p99 ms | max ms |"
    )
    print("|---|---|---|---|---|---|---|")
    p99 = {}
    for name, total in totals.items():
        ordered = sorted(total.latencies)
        p99[name] = percentile(ordered, 99) * 1000
        count = len(ordered) + total.dropped
        reloads = f"{total.reloads} of {total.reloads + total.late}"
        p50, top = statistics.median(ordered) * 1000, ordered[-1] * 1000
        print(
            f"| {name} | {count} | {total.dropped} | {reloads} "
            f"| {p50:.2f} | {p99[name]:.2f} | {top:.2f} |"
        )
    change = (p99["reload"] / p99["steady"] - 1) * 100
    dropped = totals["reload"].dropped + totals["steady"].dropped
    late = totals["reload"].late
    verdict = "met" if dropped == 0 and change < 20 and not late else "missed"
    print(
        f"reloads move p99 by {change:+.1f} %, {dropped} dropped; "
        f"target: none dropped and p99 moved by less than 20 %: {verdict}"
        + (f" ({late} reloads ended after their phase's load: raise --requests)" if late else "")
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
