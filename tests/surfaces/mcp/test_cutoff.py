"""An API key revoked while MCP clients hold streams open with it: those streams end, the
session's subscriptions with them, as a WebSocket connection on that key is closed; and
so do a credential's that expires meanwhile, at its expiry."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import orjson
import pytest
from mcp import Client
from mcp.client.subscriptions import SubscriptionLost
from starlette.types import Message, Receive, Scope, Send

from stateway.core.errors import CredentialRevoked
from stateway.core.principal import Principal
from stateway.surfaces.auth.authenticator import IDENTITY, Identity
from stateway.surfaces.mcp.cutoff import serve_until_revoked
from tests.surfaces.mcp.test_server import (
    ACCEPT,
    Served,
    answering,
    opened_session,
    serving,
)


class Key:
    """An API key's identity, revoked when the test says so."""

    def __init__(self) -> None:
        self.revoked = asyncio.Event()
        self.identity = Identity(
            Principal("acme", "key_1"), authenticated=True, recheck=self.check, recheck_every=0.05
        )
        self.checks = 0
        self.checked_twice = asyncio.Event()

    async def check(self) -> None:
        self.checks += 1
        if self.checks >= 2:
            self.checked_twice.set()
        if self.revoked.is_set():
            raise CredentialRevoked("This API key has been revoked.")


class Changes:
    """A response's updates, one each time the test calls :meth:`change`."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[None] = asyncio.Queue()

    def change(self) -> None:
        self._queue.put_nowait(None)

    async def changes(self) -> AsyncIterator[None]:
        while True:
            await self._queue.get()
            yield


def following(served: Served) -> Changes:
    """Every URI subscribed to or listened for changes as the result says."""
    followed = Changes()

    async def updates(principal: Principal, uri: str) -> Changes:
        return followed

    served.surface._updates = updates  # type: ignore[method-assign,assignment]
    return followed


def call(request_id: int, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}


async def rest_of(lines: AsyncIterator[str]) -> str:
    """What a stream sends until it ends."""
    return "\n".join([line async for line in lines])


URI = "stateway://acme/responses/resp_1"


async def test_a_revoked_keys_notification_stream_and_subscriptions_end() -> None:
    """The standalone GET stream of a 2025-11-25 session ends (it carried a subscription's
    notifications), and so does the subscription: nothing more is sent for that key."""
    key = Key()
    async with serving(answering(), key.identity) as served, httpx2.AsyncClient() as http:
        session = await opened_session(http, served, "2025-11-25")
        response = following(served)
        stream = {**session, "accept": "text/event-stream"}
        async with http.stream("GET", served.url, headers=stream, timeout=30) as notifications:
            assert notifications.status_code == 200
            subscribe = call(2, "resources/subscribe", {"uri": URI})
            assert (await http.post(served.url, json=subscribe, headers=session)).is_success
            [subscriptions] = served.surface._subscriptions.values()
            [task] = subscriptions.values()
            lines = notifications.aiter_lines()
            response.change()
            while "notifications/resources/updated" not in await anext(lines):
                pass

            key.revoked.set()
            rest = await asyncio.wait_for(rest_of(lines), 5)
            response.change()

        await asyncio.wait([task], timeout=5)
    assert task.cancelled()
    assert served.surface._subscriptions == {}
    assert "notifications/resources/updated" not in rest


async def test_a_revoked_keys_listen_stream_ends() -> None:
    """A 2026-07-28 ``subscriptions/listen`` stream (a POST's response) ends too."""
    key = Key()
    async with serving(answering(), key.identity) as served, Client(served.url) as client:
        response = following(served)
        async with client.listen(resource_subscriptions=[URI]) as subscription:
            events = aiter(subscription)
            response.change()
            await anext(events)

            key.revoked.set()
            with pytest.raises(SubscriptionLost):  # cut off, as a dropped stream is
                await asyncio.wait_for(anext(events), 5)

    assert served.escaped == []  # a request of no session: no subscriptions to end


async def test_an_expiring_tokens_listen_stream_ends_at_its_expiry() -> None:
    """A token (no key to check again) expiring while its listen stream is open."""
    expires = time.time() + 1.0
    token = Identity(Principal("acme", "user"), authenticated=True, expires_at=expires)
    async with serving(answering(), token) as served, Client(served.url) as client:
        response = following(served)
        async with client.listen(resource_subscriptions=[URI]) as subscription:
            events = aiter(subscription)
            response.change()
            await anext(events)

            with pytest.raises(SubscriptionLost):
                await asyncio.wait_for(anext(events), 5)
            assert time.time() >= expires - 0.01  # ended at its expiry, not before


async def test_a_key_still_valid_keeps_its_streams() -> None:
    """Checked again and again, a valid key's listen stream goes on."""
    key = Key()
    async with serving(answering(), key.identity) as served, Client(served.url) as client:
        response = following(served)
        async with client.listen(resource_subscriptions=[URI]) as subscription:
            events = aiter(subscription)
            await asyncio.wait_for(key.checked_twice.wait(), 5)
            response.change()
            event = await asyncio.wait_for(anext(events), 5)
    assert event.uri == URI  # type: ignore[union-attr]


async def test_a_revoked_request_naming_another_tenants_session_leaves_its_subscriptions() -> None:
    """A 2026-07-28 request is served without a session, so the ``mcp-session-id`` it
    carries is the client's word only: another tenant's key sending a session id it
    learned, its listen stream cut off by its revocation, ends nothing of that session's."""
    owner = Identity(Principal("acme", "key_1"), authenticated=True)
    other = Key()
    other.identity = Identity(
        Principal("globex", "key_2"), authenticated=True, recheck=other.check, recheck_every=0.05
    )
    async with serving(answering(), owner) as served, httpx2.AsyncClient() as http:
        session = await opened_session(http, served, "2025-11-25")
        owned = session["mcp-session-id"]
        following(served)
        subscribe = call(2, "resources/subscribe", {"uri": URI})
        assert (await http.post(served.url, json=subscribe, headers=session)).is_success
        [[task]] = [list(uris.values()) for uris in served.surface._subscriptions.values()]

        served.identity = other.identity
        listen = call(3, "subscriptions/listen", {"notifications": {}, "_meta": MODERN})
        modern = {**ACCEPT, "mcp-protocol-version": MODERN_VERSION}
        modern |= {"mcp-method": "subscriptions/listen", "mcp-session-id": owned}
        async with http.stream("POST", served.url, json=listen, headers=modern) as stream:
            assert stream.status_code == 200
            lines = stream.aiter_lines()
            while "acknowledged" not in await anext(lines):
                pass
            other.revoked.set()
            await asyncio.wait_for(rest_of(lines), 5)

        await asyncio.sleep(0.1)
        assert not task.done()
        assert [list(uris) for uris in served.surface._subscriptions.values()] == [[URI]]


MODERN_VERSION = "2026-07-28"
MODERN = {
    "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
}


async def cut_off(answer: list[Message]) -> tuple[CredentialRevoked | None, list[Message]]:
    """What ``serve_until_revoked`` sends for a request whose app sends ``answer`` and then
    waits, its key revoked meanwhile (and what it returns)."""
    key = Key()
    scope: dict[str, Any] = {"type": "http", "method": "POST", "path": "/mcp", "headers": []}
    scope[IDENTITY] = key.identity
    sent: list[Message] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        for message in answer:
            await send(message)
        key.revoked.set()
        await asyncio.Event().wait()

    async def receive() -> Message:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        sent.append(message)

    revoked = await asyncio.wait_for(serve_until_revoked(app, scope, receive, send), 5)
    return revoked, sent


async def test_a_request_cut_off_before_its_answer_started_is_the_401() -> None:
    revoked, sent = await cut_off([])
    assert isinstance(revoked, CredentialRevoked)
    [start, body] = sent
    assert start["status"] == 401
    error = orjson.loads(body["body"])["error"]
    assert (error["message"], error["code"]) == (revoked.message, revoked.code)


async def test_an_answer_cut_off_under_way_is_ended_there() -> None:
    """Its SSE stream closed with what was sent of it: no second answer."""
    start = {"type": "http.response.start", "status": 200, "headers": []}
    chunk = {"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True}
    revoked, sent = await cut_off([start, chunk])
    assert revoked is not None
    assert sent == [start, chunk, {"type": "http.response.body", "body": b"", "more_body": False}]


async def test_an_answer_already_whole_is_left_as_it_was() -> None:
    """A request whose credential stopped holding after its whole answer (a listen
    stream's app still unwinding) sends nothing more."""
    start = {"type": "http.response.start", "status": 200, "headers": []}
    whole = {"type": "http.response.body", "body": b"{}", "more_body": False}
    revoked, sent = await cut_off([start, whole])
    assert revoked is not None
    assert sent == [start, whole]
