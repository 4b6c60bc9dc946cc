"""Small scripted model servers on loopback, for the upstream client's tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from stateway.backends.upstream_http import UpstreamClient

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Loopback:
    """Starts aiohttp servers answering every path with one handler; ``released`` is set
    when the test ends, so handlers that hold a request open can wait on it. Clients it
    adopts are closed then too."""

    def __init__(self) -> None:
        self.released = asyncio.Event()
        self._servers: list[TestServer] = []
        self._clients: list[UpstreamClient] = []

    def adopt(self, client: UpstreamClient) -> UpstreamClient:
        """Close ``client`` when the test ends, whatever happens."""
        self._clients.append(client)
        return client

    async def serve(self, handler: Handler) -> str:
        """Start a server; return its ``http://127.0.0.1:PORT/v1`` base URL."""
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        self._servers.append(server)
        return str(server.make_url("/v1"))

    async def hold(self, limit: float = 10.0) -> None:
        """Wait until the test ends (at most ``limit`` seconds)."""
        try:
            async with asyncio.timeout(limit):
                await self.released.wait()
        except TimeoutError:
            pass

    async def close(self) -> None:
        self.released.set()
        for client in self._clients:
            await client.aclose()
        for server in self._servers:
            await server.close()


@pytest.fixture
async def loopback() -> AsyncIterator[Loopback]:
    servers = Loopback()
    try:
        yield servers
    finally:
        await servers.close()
