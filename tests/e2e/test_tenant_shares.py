"""What one tenant may take of what a gateway process shares among tenants, on SQLite and
PostgreSQL: however much one tenant takes, another still gets its share. MCP sessions:
a tenant opening them without end is refused past its own share (429), and another
tenant still opens one."""

from __future__ import annotations

from typing import Any

import httpx2

from stateway.surfaces.mcp.limits import MAX_SESSIONS
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
