"""Each tenant's share of the MCP sessions: a tenant holding its share is refused another
(429), while other tenants still open theirs; an ended session makes room again."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import httpx2

from stateway.core.principal import Principal
from stateway.surfaces.mcp.limits import McpLimits
from tests.surfaces.mcp.test_server import ACCEPT, ACME, Served, answering, initialize, serving

SHARE = McpLimits(tenant_sessions=2)
OTHER = replace(ACME, principal=Principal("other", "key_2"))


async def open_session(http: httpx2.AsyncClient, served: Served) -> httpx2.Response:
    return await http.post(served.url, json=initialize("2025-11-25"), headers=ACCEPT)


def ending(answer: httpx2.Response) -> dict[str, str]:
    """The headers that end the session ``answer`` opened."""
    session = answer.headers["mcp-session-id"]
    return {**ACCEPT, "mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}


async def test_a_tenant_holding_its_share_is_refused_another_session() -> None:
    async with serving(answering(), limits=SHARE) as served, httpx2.AsyncClient() as http:
        first, second = [await open_session(http, served) for _ in range(2)]
        refused = await open_session(http, served)
        served.identity = OTHER
        theirs = await open_session(http, served)

        assert first.status_code == second.status_code == theirs.status_code == 200
        assert refused.status_code == 429
        error = refused.json()["error"]
        assert error["code"] == "too_many_sessions"
        assert error["type"] == "invalid_request_error"
        assert error["message"].startswith("This tenant has 2 MCP sessions open")  # its share
        assert "mcp-session-id" not in refused.headers
        assert len(served.surface._manager._server_instances) == 3  # nothing kept for it

        served.identity = ACME
        assert (await http.delete(served.url, headers=ending(first))).status_code == 200
        assert (await open_session(http, served)).status_code == 200


async def test_concurrent_openings_get_the_share_and_no_more() -> None:
    async with serving(answering(), limits=SHARE) as served, httpx2.AsyncClient() as http:
        answers = await asyncio.gather(*(open_session(http, served) for _ in range(8)))

    assert sorted(answer.status_code for answer in answers) == [200, 200] + [429] * 6


async def test_without_a_share_a_tenant_opens_sessions_up_to_the_process_limit() -> None:
    """Without auth every caller is one tenant: only the process's limit applies."""
    async with serving(answering()) as served, httpx2.AsyncClient() as http:
        answers = [await open_session(http, served) for _ in range(3)]

    assert [answer.status_code for answer in answers] == [200, 200, 200]
