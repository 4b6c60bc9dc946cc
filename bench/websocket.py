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

- **a client that stops reading**: one ``store: false`` response of ``--huge`` bytes
  (the fake's ``[[huge:N]]``, streamed in small deltas) sent to a client that never reads,
  against the same response read by a client that does: the gateway's peak RSS growth in
  each (sampled every 10 ms). The outbox bounds what waits for the slow client (it is
  closed with 4429 while the run completes), so the two peaks should be alike: memory
  bounded by the response, not by how far the client trails.

``--quick`` is a smoke run (a few turns and connections, a smaller response).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import resource
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
from websockets.asyncio.client import ClientConnection, connect
from websockets.client import ClientProtocol
from websockets.protocol import State
from websockets.uri import parse_uri

from bench.procfs import rss_mib
from stateway.fake_upstream.launch import start_fake_upstream
from stateway.launch import GATEWAY_ANNOUNCEMENT, launch

MODEL = "fake-model"
RSS_TARGET_MB = 150.0
ROUNDS = 5


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


def stalled_request(url: str, frame: dict[str, object]) -> socket.socket:
    """A WebSocket that sends ``frame`` and then reads nothing (a tiny receive buffer, so
    the gateway's writes back up at once); close the returned socket when done."""
    address = urlsplit(url)
    sock = socket.create_connection((address.hostname or "127.0.0.1", address.port or 80))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    protocol = ClientProtocol(parse_uri(url.replace("http://", "ws://") + "/v1/responses"))
    protocol.send_request(protocol.connect())
    while protocol.state is not State.OPEN:
        for data in protocol.data_to_send():
            sock.sendall(data)
        protocol.receive_data(sock.recv(4096))
    protocol.send_text(json.dumps(frame).encode())
    for data in protocol.data_to_send():
        sock.sendall(data)
    return sock


async def peak_growth(pid: int, work: asyncio.Task[None]) -> float:
    """The most ``pid``'s RSS grew (MiB) over its value before, while ``work`` runs."""
    before = peak = rss_mib(pid)
    while not work.done():
        peak = max(peak, rss_mib(pid))
        await asyncio.sleep(0.01)
    await work
    return peak - before


async def stalled_memory(url: str, pid: int, size: int) -> None:
    frame = {"type": "response.create", "model": MODEL, "store": False}
    frame["input"] = f"[[huge:{size}]]"

    async def read_it() -> None:
        async with connect(url.replace("http://", "ws://") + "/v1/responses", max_size=None) as ws:
            await ws.send(json.dumps(frame))
            while json.loads(await ws.recv())["type"] != "response.completed":
                pass

    async def leave_it() -> None:
        sock = await asyncio.to_thread(stalled_request, url, frame)
        try:
            await asyncio.sleep(0.5)  # let the outbox fill
            async with aiohttp.ClientSession() as http:  # until the gateway is idle again
                while True:
                    async with http.get(url + "/metrics") as reply:
                        text = await reply.text()
                    if "stateway_active_runs 0.0" in text:
                        break
                    await asyncio.sleep(0.05)
        finally:
            with contextlib.suppress(OSError):
                sock.close()

    await read_it()  # warm: the first large answer grows the allocator's pools
    read = await peak_growth(pid, asyncio.create_task(read_it()))
    stalled = await peak_growth(pid, asyncio.create_task(leave_it()))
    print(f"\na {size:,}-byte response, store:false: gateway peak RSS growth (MiB)")
    print("| client | peak RSS growth |\n|---|--:|")
    print(f"| reads everything | {read:.1f} |")
    print(f"| stops reading (closed with 4429) | {stalled:.1f} |")


def median(samples: list[float]) -> float:
    return statistics.median(samples)


async def measure(url: str, pid: int, turns: int, connections: int, huge: int) -> None:
    await http_turns(url, 50)  # warm both paths
    await socket_turns(url, 50)
    socket_samples: list[float] = []
    http_samples: list[float] = []
    for _ in range(ROUNDS):  # alternated, so a drift in the machine's load hits both alike
        socket_samples += await socket_turns(url, max(1, turns // ROUNDS))
        http_samples += await http_turns(url, max(1, turns // ROUNDS))
    socket_ms, http_ms = median(socket_samples), median(http_samples)
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
    await stalled_memory(url, pid, huge)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--huge", type=int, default=8_000_000, help="bytes of the response")
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    args = parser.parse_args()
    if args.quick:
        args.turns, args.connections, args.huge = 20, 50, 2_000_000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(hard, max(soft, 4 * args.connections + 256))
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))  # inherited by the gateway
    with tempfile.TemporaryDirectory() as directory, start_fake_upstream() as upstream:
        database = f"sqlite:///{Path(directory) / 'stateway.db'}"
        command = [sys.executable, "-m", "stateway", "serve", "--port", "0"]
        command += ["--upstream", upstream, "--database", database]
        with launch(command, GATEWAY_ANNOUNCEMENT, timeout=60) as gateway:
            asyncio.run(measure(gateway.url, gateway.pid, args.turns, args.connections, args.huge))


if __name__ == "__main__":
    main()
