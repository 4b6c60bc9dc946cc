"""The upgrade's ASGI app in process: a web page of another site refused, each tenant's
share of the connections, the drain at shutdown."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from stateway.core.principal import Principal
from stateway.surfaces.auth.authenticator import Identity
from stateway.surfaces.websocket.endpoint import WebSocketResponses
from tests.surfaces.websocket.client import Client, surface

HOST = [(b"host", b"gw.example")]
HTTP_ANSWERS = {"websocket.http.response": {}}


def answer(client: Client) -> tuple[int, dict[str, Any]]:
    """The status and JSON body of an upgrade refused in HTTP."""
    start, *body = client.sent
    assert start["type"] == "websocket.http.response.start"
    return start["status"], orjson.loads(b"".join(m.get("body", b"") for m in body))


def tenant(name: str) -> Identity:
    return Identity(Principal(name), authenticated=True)


async def test_an_upgrade_from_another_site_s_page_is_refused_with_a_403() -> None:
    app = surface()
    page = [*HOST, (b"origin", b"https://evil.example")]
    refused = Client(app, headers=page, extensions=HTTP_ANSWERS)
    await asyncio.wait_for(refused.task, 5)
    status, body = answer(refused)
    assert status == 403
    assert body["error"] == {
        "message": "WebSocket upgrades from a web page of another site are refused.",
        "type": "invalid_request_error",
        "param": None,
        "code": "origin_not_allowed",
    }
    assert not app.sessions


async def test_a_server_that_cannot_answer_in_http_closes_the_refused_upgrade() -> None:
    refused = Client(surface(), headers=[*HOST, (b"origin", b"https://evil.example")])
    await asyncio.wait_for(refused.task, 5)
    assert refused.sent == [
        {
            "type": "websocket.close",
            "code": 1008,
            "reason": "WebSocket upgrades from a web page of another site are refused.",
        }
    ]


async def test_a_page_of_the_gateway_s_own_site_or_a_listed_origin_is_served() -> None:
    app = surface(origins=frozenset({"https://app.example"}))
    own = Client(app, headers=[*HOST, (b"origin", b"https://gw.example")])
    listed = Client(app, headers=[*HOST, (b"origin", b"https://app.example")])
    for client in (own, listed):
        await client.until(lambda c: bool(c.sent))
        assert client.sent[0] == {"type": "websocket.accept"}
        await client.leave()


async def test_a_tenant_holds_its_share_of_the_connections_and_no_more() -> None:
    """Each connection may keep ``max_checkpoint_bytes`` in memory while idle: a tenant
    past its share is refused (429), another tenant is not, and a connection closed gives
    its place back."""
    app = surface(tenant_connections=2)
    held = [Client(app, tenant("a"), extensions=HTTP_ANSWERS) for _ in range(2)]
    for client in held:
        await client.until(lambda c: bool(c.sent))
        assert client.sent == [{"type": "websocket.accept"}]

    refused = Client(app, tenant("a"), extensions=HTTP_ANSWERS)
    await asyncio.wait_for(refused.task, 5)
    status, body = answer(refused)
    assert status == 429
    assert body["error"]["code"] == "too_many_connections"
    assert body["error"]["message"] == (
        "This tenant has 2 WebSocket connections open, as many as it may; close one first."
    )
    other = Client(app, tenant("b"))
    await other.until(lambda c: bool(c.sent))
    assert other.sent == [{"type": "websocket.accept"}]

    await held[0].leave()
    again = Client(app, tenant("a"))
    await again.until(lambda c: bool(c.sent))
    assert again.sent == [{"type": "websocket.accept"}]
    for client in (held[1], other, again):
        await client.leave()
    assert not app._held  # no tenant left counted


async def test_a_refused_tenant_s_upgrade_without_http_answers_is_closed() -> None:
    app = surface(tenant_connections=1)
    held = Client(app, tenant("a"))
    await held.until(lambda c: bool(c.sent))
    refused = Client(app, tenant("a"))
    await asyncio.wait_for(refused.task, 5)
    assert refused.closes == [
        (
            1008,
            "This tenant has 1 WebSocket connections open, as many as it may; close one first.",
        )
    ]
    await held.leave()


async def test_the_admin_credential_s_connections_count_against_no_tenant() -> None:
    app = surface(tenant_connections=1)
    admin = Identity(None, admin=True, authenticated=True)
    clients = [Client(app, admin), Client(app, admin)]
    for client in clients:
        await client.until(lambda c: bool(c.sent))
        assert client.sent == [{"type": "websocket.accept"}]
    for client in clients:
        await client.leave()
    assert not app._held


async def test_without_a_share_any_number_of_connections_are_served() -> None:
    app = surface()
    clients = [Client(app, tenant("a")) for _ in range(3)]
    for client in clients:
        await client.until(lambda c: bool(c.sent))
        assert client.sent == [{"type": "websocket.accept"}]
    assert len(app.sessions) == 3
    for client in clients:
        await client.leave()
    assert not app.sessions
    assert not app._held  # nothing counted without a share


async def test_a_connection_that_ends_before_its_upgrade_is_not_served() -> None:
    app = WebSocketResponses.__new__(WebSocketResponses)  # reaches nothing of its own
    sent: list[Any] = []

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.disconnect", "code": 1006}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app({"type": "websocket", "headers": []}, receive, send)
    assert sent == []


@pytest.mark.parametrize("sessions", [0, 2])
async def test_the_drain_refuses_new_requests_and_closes_every_session_with_1001(
    sessions: int,
) -> None:
    app = surface()
    clients = [Client(app) for _ in range(sessions)]
    for client in clients:
        await client.until(lambda c: bool(c.sent))
    await asyncio.wait_for(app.drain(), 5)
    assert app.draining
    for client in clients:
        assert client.closes == [(1001, "The server is shutting down.")]
        await client.leave()


async def test_the_drain_returns_once_the_close_went_out() -> None:
    """The server's shutdown goes on after it: a close still on its way would be lost."""
    app = surface()
    sent = asyncio.Event()
    client = Client(app, closing=sent)
    await client.until(lambda c: bool(c.sent))
    draining = asyncio.create_task(app.drain())
    await asyncio.sleep(0.05)
    assert not draining.done()
    sent.set()
    await asyncio.wait_for(draining, 5)
    assert client.closes == [(1001, "The server is shutting down.")]
    await client.leave()
