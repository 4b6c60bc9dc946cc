"""What one tenant may take of what a gateway process shares among tenants, on SQLite and
PostgreSQL: however much one tenant takes, another still gets its share. MCP sessions:
a tenant opening them without end is refused past its own share (429), and another
tenant still opens one; WebSocket connections alike."""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from typing import Any

import httpx2
import pytest
from websockets.asyncio.client import connect as websocket_connect
from websockets.exceptions import InvalidStatus

from stateway.surfaces.mcp.limits import MAX_SESSIONS
from stateway.surfaces.websocket.endpoint import MAX_TENANT_CONNECTIONS
from tests.e2e.test_tenant_isolation import Tenants, tenants

__all__ = ["tenants"]  # the fixture, shared with the walk of every route

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "shares-test", "version": "1"},
    },
}


def as_(key: str, session: str | None = None) -> dict[str, str]:
    headers = {"accept": "application/json, text/event-stream", "authorization": f"Bearer {key}"}
    if session is not None:
        headers |= {"mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
    return headers


async def test_one_tenant_cannot_take_every_mcp_session(tenants: Tenants) -> None:
    url = tenants.gateway.url + "/mcp"
    opened: list[tuple[str, str]] = []
    async with httpx2.AsyncClient(timeout=30) as http:

        async def open_as(key: str) -> Any:
            answer = await http.post(url, json=INITIALIZE, headers=as_(key))
            if answer.status_code == 200:
                opened.append((key, answer.headers["mcp-session-id"]))
            return answer

        try:
            for _ in range(MAX_SESSIONS):
                refused = await open_as(tenants.alice)
                if refused.status_code != 200:
                    break
            assert refused.status_code == 429, refused.text
            assert refused.json()["error"]["code"] == "too_many_sessions"
            assert len(opened) < MAX_SESSIONS

            other = await open_as(tenants.bob)
            assert other.status_code == 200, other.text

            key, session = opened.pop(0)  # one ended makes room for one
            assert (await http.delete(url, headers=as_(key, session))).status_code == 200
            assert (await open_as(tenants.alice)).status_code == 200
        finally:
            for key, session in opened:
                await http.delete(url, headers=as_(key, session))


async def test_one_tenant_cannot_hold_websockets_without_end(tenants: Tenants) -> None:
    """Each connection may keep ``[websocket] max_checkpoint_bytes`` (32 MiB) of responses
    in memory, idle or not: a tenant's connections are bounded, so one tenant cannot take
    the process's memory from the others."""
    url = tenants.gateway.url.replace("http://", "ws://") + "/v1/responses"

    def open_as(key: str) -> Any:
        return websocket_connect(url, additional_headers={"Authorization": f"Bearer {key}"})

    async with AsyncExitStack() as held:
        for _ in range(MAX_TENANT_CONNECTIONS):
            await held.enter_async_context(open_as(tenants.alice))
        with pytest.raises(InvalidStatus) as refused:
            await held.enter_async_context(open_as(tenants.alice))
        answer = refused.value.response
        assert answer.status_code == 429
        assert json.loads(answer.body or b"")["error"]["code"] == "too_many_connections"

        other = await held.enter_async_context(open_as(tenants.bob))
        await other.send(json.dumps({"type": "response.create", "model": "m", "input": 1}))
        assert json.loads(await other.recv())["type"] == "error"  # served: the frame is bad

    async with open_as(tenants.alice) as again:  # ended, they make room
        await again.send(json.dumps({"type": "response.create", "model": "m", "input": 1}))
        assert json.loads(await again.recv())["type"] == "error"
