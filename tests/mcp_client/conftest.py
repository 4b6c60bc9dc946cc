"""Fixtures: the real test MCP server on loopback and a pooled client closed after each test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from stateway.mcp_client.pool import PooledMcpClient
from tests.support.mcp_server import RunningMcpServer, serve_mcp


@pytest.fixture
def mcp_server() -> Iterator[RunningMcpServer]:
    with serve_mcp(page_size=3) as server:
        yield server


@pytest.fixture
async def pool() -> AsyncIterator[PooledMcpClient]:
    client = PooledMcpClient(connect_timeout=5.0)
    yield client
    await client.aclose()
