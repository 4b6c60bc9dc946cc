"""``python -m bench.websocket``: WebSocket mode's cost per turn and per idle connection.

Against the real ``stateway serve`` (SQLite) in front of the shipped fake upstream:

- **per-turn latency**: ``--turns`` turns, one at a time, each a ``response.create`` on
  one WebSocket connection, timed from the send to its ``response.completed``; and the
  same turns as streamed ``POST /v1/responses`` over one keep-alive HTTP connection. The
  issue's target: the socket adds no more per turn than the HTTP path.
- **idle connections**: the gateway's RSS before and after ``--connections`` WebSocket
  connections are opened and left idle (the client offers permessage-deflate, as the
  ``openai`` SDK does). Target: the gateway holds 1,000 of them in at most 150 MB of RSS
  in all.

``--quick`` is a smoke run (a few turns and connections).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from websockets.asyncio.client import ClientConnection, connect

from bench.procfs import rss_mib
from stateway.fake_upstream.launch import start_fake_upstream
from stateway.launch import GATEWAY_ANNOUNCEMENT, launch

MODEL = "fake-model"
RSS_TARGET_MB = 150.0


async def socket_turns(url: str, turns: int) -> list[float]:
    samples = []
    async with connect(url.replace("http://", "ws://") + "/v1/responses") as ws:
        for n in range(turns):
            frame = {"type": "response.create", "model": MODEL, "input": f"turn {n}"}
            start = time.perf_counter()
            await ws.send(json.dumps(frame))
            while json.loads(await ws.recv())["type"] != "response.completed":
                pass
            samples.append((time.perf_counter() - start) * 1000)
    return samples


async def http_turns(url: str, turns: int) -> list[float]:
    samples = []
    connector = aiohttp.TCPConnector(limit=1)
    async with aiohttp.ClientSession(connector=connector) as session:
        for n in range(turns):
            body = {"model": MODEL, "input": f"turn {n}", "stream": True}
            start = time.perf_counter()
            async with session.post(url + "/v1/responses", json=body) as reply:
                async for line in reply.content:
                    if line.startswith(b"event: response.completed"):
                        break
                await reply.read()
            samples.append((time.perf_counter() - start) * 1000)
    return samples


async def idle_connections(url: str, pid: int, count: int) -> tuple[float, float]:
    """The gateway's RSS (MiB) before, and with ``count`` idle connections open."""
    before = rss_mib(pid)
    sockets: list[ClientConnection] = []
    try:
        for _ in range(count):
            sockets.append(await connect(url.replace("http://", "ws://") + "/v1/responses"))
        await asyncio.sleep(1.0)  # let the gateway settle its allocations
        return before, rss_mib(pid)
    finally:
        await asyncio.gather(*(ws.close() for ws in sockets))


def median(samples: list[float]) -> float:
    return statistics.median(samples[len(samples) // 10 :])  # the first tenth warms up


async def measure(url: str, pid: int, turns: int, connections: int) -> None:
    await http_turns(url, 5)  # warm both paths
    await socket_turns(url, 5)
    socket_ms = median(await socket_turns(url, turns))
    http_ms = median(await http_turns(url, turns))
    verdict = "ok" if socket_ms <= http_ms else "OVER TARGET"
    print("| path | median ms per turn |\n|---|--:|")
    print(f"| WebSocket (one connection) | {socket_ms:.2f} |")
    print(f"| HTTP + SSE (one keep-alive connection) | {http_ms:.2f} |")
    print(f"\nWebSocket vs HTTP: {socket_ms - http_ms:+.2f} ms per turn ({verdict})\n")
    before, after = await idle_connections(url, pid, connections)
    added = (after - before) * 1000 / connections  # MiB per 1,000 connections
    total_mb = after * 1024 * 1024 / 1e6
    verdict = "ok" if total_mb <= RSS_TARGET_MB else "OVER TARGET"
    print(f"gateway RSS: {before:.1f} MiB idle, {after:.1f} MiB with {connections} idle")
    print(f"WebSocket connections: {added:.1f} MiB added per 1,000 connections")
    print(
        f"RSS with {connections} idle: {total_mb:.1f} MB (target {RSS_TARGET_MB:g} MB: {verdict})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    args = parser.parse_args()
    if args.quick:
        args.turns, args.connections = 20, 50
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(hard, max(soft, 4 * args.connections + 256))
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))  # inherited by the gateway
    with tempfile.TemporaryDirectory() as directory, start_fake_upstream() as upstream:
        database = f"sqlite:///{Path(directory) / 'stateway.db'}"
        command = [sys.executable, "-m", "stateway", "serve", "--port", "0"]
        command += ["--upstream", upstream, "--database", database]
        with launch(command, GATEWAY_ANNOUNCEMENT, timeout=60) as gateway:
            asyncio.run(measure(gateway.url, gateway.pid, args.turns, args.connections))


if __name__ == "__main__":
    main()
