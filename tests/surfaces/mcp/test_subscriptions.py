"""A ``resources/subscribe`` subscription lives no longer than its session; sessions are
kept no longer than clients use them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from types import SimpleNamespace
from typing import Any, cast

import httpx2
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ResourceUpdated
from mcp_types import (
    INVALID_PARAMS,
    EmptyResult,
    SubscribeRequestParams,
    UnsubscribeRequestParams,
)
from starlette.requests import Request

from stateway.core.commands import CreateResponse
from stateway.core.errors import NotFound
from stateway.core.gateway import Gateway
from stateway.core.inference import Finish, TextDelta
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.core.watch import Watch
from stateway.protocols.responses.stream import encode_event_json
from stateway.surfaces.auth.authenticator import IDENTITY, Identity
from stateway.surfaces.mcp import limits, server
from stateway.surfaces.mcp.updates import ResponseUpdates
from tests.core.fakes import MemoryStore, ScriptedBackend
from tests.surfaces.mcp.test_cutoff import call, following
from tests.surfaces.mcp.test_server import (
    Served,
    answering,
    opened_session,
    serving,
)

URI = "stateway://acme/responses/resp_1"


class Endless:
    """Updates of a response that runs for as long as the test lasts."""

    async def changes(self) -> AsyncIterator[None]:
        await asyncio.Event().wait()
        yield


async def test_a_subscription_ends_with_its_session(monkeypatch: pytest.MonkeyPatch) -> None:
    """A dead session's notifications are dropped without an error, so only the session's
    own teardown (the SDK unwinds its connection's exit stack: DELETE, idle, lost) can end
    a subscription to a response that still runs."""
    surface = server.McpSurface(cast(Gateway, object()))

    async def updates(principal: Principal, uri: str) -> Endless:
        return Endless()

    monkeypatch.setattr(surface, "_updates", updates)
    monkeypatch.setattr(server, "_principal", lambda ctx: Principal())
    connection = SimpleNamespace(exit_stack=AsyncExitStack())
    ctx: Any = SimpleNamespace(session=SimpleNamespace(_connection=connection), request=None)
    params = SubscribeRequestParams(uri="stateway://default/responses/resp_1")
    await surface._subscribe(ctx, params)
    [[task]] = [list(uris.values()) for uris in surface._subscriptions.values()]
    await asyncio.sleep(0.01)
    assert not task.done()

    await connection.exit_stack.aclose()
    await asyncio.wait([task], timeout=5)
    assert task.cancelled()
    assert surface._subscriptions == {}


class Teardown:
    """A session's exit stack, counting what its teardown will run."""

    def __init__(self) -> None:
        self.callbacks: list[Callable[[], object]] = []

    def callback(self, function: Callable[..., object], *args: object) -> None:
        self.callbacks.append(lambda: function(*args))


async def test_subscribing_again_and_again_holds_nothing_more_until_the_session_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A long session that subscribes to response after response (each ended or
    unsubscribed) adds one teardown callback in all, not one per subscription."""
    surface = server.McpSurface(cast(Gateway, object()))

    async def updates(principal: Principal, uri: str) -> Endless:
        return Endless()

    monkeypatch.setattr(surface, "_updates", updates)
    monkeypatch.setattr(server, "_principal", lambda ctx: Principal())
    teardown = Teardown()
    ctx: Any = SimpleNamespace(
        session=SimpleNamespace(_connection=SimpleNamespace(exit_stack=teardown)), request=None
    )
    for n in range(50):
        uri = f"stateway://default/responses/resp_{n}"
        await surface._subscribe(ctx, SubscribeRequestParams(uri=uri))
        await surface._unsubscribe(ctx, UnsubscribeRequestParams(uri=uri))
    await surface._subscribe(ctx, SubscribeRequestParams(uri="stateway://default/responses/r"))
    [[task]] = [list(uris.values()) for uris in surface._subscriptions.values()]

    assert len(teardown.callbacks) == 1
    for callback in teardown.callbacks:
        callback()
    await asyncio.wait([task], timeout=5)
    assert task.cancelled()
    assert surface._subscriptions == {}


async def test_an_unsubscription_ends_that_subscription_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One naming a URI the session never subscribed to (or a session with none at all)
    is answered as any other: there is nothing to end."""
    surface = server.McpSurface(cast(Gateway, object()))

    async def updates(principal: Principal, uri: str) -> Endless:
        return Endless()

    monkeypatch.setattr(surface, "_updates", updates)
    monkeypatch.setattr(server, "_principal", lambda ctx: Principal())
    ctx: Any = SimpleNamespace(session=SimpleNamespace(), request=None)
    first, second = (f"stateway://default/responses/resp_{n}" for n in (1, 2))
    assert isinstance(
        await surface._unsubscribe(ctx, UnsubscribeRequestParams(uri=first)), EmptyResult
    )

    for uri in (first, second):
        await surface._subscribe(ctx, SubscribeRequestParams(uri=uri))
    [subscribed] = surface._subscriptions.values()
    tasks = dict(subscribed)
    await surface._unsubscribe(ctx, UnsubscribeRequestParams(uri="stateway://default/x"))
    await surface._unsubscribe(ctx, UnsubscribeRequestParams(uri=first))
    await asyncio.wait([tasks[first]], timeout=5)

    assert tasks[first].cancelled()
    assert not tasks[second].done()
    assert list(subscribed) == [second]
    surface._end_subscriptions(next(iter(surface._subscriptions)))


def request_in(session_id: str, tenant: str = "acme") -> Any:
    """A request's context: its session's id, the identity it acts for."""
    scope = {"type": "http", "headers": [(b"mcp-session-id", session_id.encode())]}
    scope[IDENTITY] = Identity(Principal(tenant), authenticated=True)
    return SimpleNamespace(session=SimpleNamespace(), request=Request(scope))


async def test_each_session_has_subscriptions_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two sessions of one tenant subscribing to one response are each told of its
    changes; one unsubscribing leaves the other's."""
    surface = server.McpSurface(cast(Gateway, object()))

    async def updates(principal: Principal, uri: str) -> Endless:
        return Endless()

    monkeypatch.setattr(surface, "_updates", updates)
    first, second = request_in("session-1"), request_in("session-2")
    for ctx in (first, second):
        await surface._subscribe(ctx, SubscribeRequestParams(uri=URI))
    assert set(surface._subscriptions) == {
        ("session-1", "acme", "anonymous"),
        ("session-2", "acme", "anonymous"),
    }
    await surface._unsubscribe(second, UnsubscribeRequestParams(uri=URI))
    assert list(surface._subscriptions[("session-1", "acme", "anonymous")]) == [URI]
    assert surface._subscriptions[("session-2", "acme", "anonymous")] == {}
    for subscriber in list(surface._subscriptions):
        surface._end_subscriptions(subscriber)


async def test_a_subscription_whose_response_ended_can_be_made_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its updates over, it is no longer held: subscribing again follows the response
    anew (a response deleted and its id reused cannot be, but one answered)."""
    surface = server.McpSurface(cast(Gateway, object()))
    opened: list[str] = []

    class Ended:
        async def changes(self) -> AsyncIterator[None]:
            return
            yield

    async def updates(principal: Principal, uri: str) -> Ended:
        opened.append(uri)
        return Ended()

    monkeypatch.setattr(surface, "_updates", updates)
    ctx = request_in("session-1")
    await surface._subscribe(ctx, SubscribeRequestParams(uri=URI))
    [subscribed] = surface._subscriptions.values()
    await asyncio.wait(list(subscribed.values()), timeout=5)
    assert subscribed == {}
    await surface._subscribe(ctx, SubscribeRequestParams(uri=URI))
    assert opened == [URI, URI]


def gateway_over(backend: ScriptedBackend) -> Gateway:
    store = MemoryStore()
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    return Gateway(store, router, Loop(store), RunRegistry(), encoder=encode_event_json)


def hello(text: str) -> list[dict[str, Any]]:
    return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}]


async def test_a_response_that_had_ended_never_changes() -> None:
    """A subscriber to a response already ended is told of no change (its read is the
    last word), rather than once as if it had just ended."""
    gateway = gateway_over(answering())
    run = await gateway.execute(Principal(), CreateResponse(model="m", input=hello("hi")))
    await run.wait()
    updates = await ResponseUpdates.open(gateway, Principal(), run.id)
    assert [change async for change in updates.changes()] == []


async def test_a_background_response_changes_as_its_events_are_stored() -> None:
    """Followed through its event log, a change per batch while it runs (not only its
    end, as a foreground response read until it ends)."""
    gate = asyncio.Event()
    gateway = gateway_over(ScriptedBackend([TextDelta("a"), Finish("stop")], gate=gate))
    command = CreateResponse(model="m", input=hello("hi"), background=True)
    run = await gateway.execute(Principal(), command)
    async for _ in run.subscribe_batches():  # stored, as create_response answers it
        break
    updates = await ResponseUpdates.open(gateway, Principal(), run.id)

    async def follow() -> int:
        changes = 0
        async for _ in updates.changes():
            changes += 1
            gate.set()  # the run ends only after its first change was told
        return changes

    assert await asyncio.wait_for(follow(), 5) >= 2


async def test_a_foreground_response_changes_once_when_it_ends() -> None:
    """It has no event log to follow: read until it has ended, then told once. (Streamed:
    its id is out, and it is stored, while it runs.)"""
    gate = asyncio.Event()
    backend = ScriptedBackend([TextDelta("a"), Finish("stop")], gate=gate)
    gateway = gateway_over(backend)
    principal = Principal("acme")
    command = CreateResponse(model="m", input=hello("hi"), stream=True)
    run = await gateway.execute(principal, command)
    async for _ in run.subscribe_batches():  # stored
        break
    updates = await ResponseUpdates.open(gateway, principal, run.id)

    async def follow() -> int:
        changes = 0
        async for _ in updates.changes():
            changes += 1
        return changes

    following = asyncio.create_task(follow())
    await asyncio.sleep(0.05)
    assert not following.done()
    gate.set()
    assert await asyncio.wait_for(following, 5) == 1


async def test_updates_are_of_a_callers_own_responses_only() -> None:
    """A conversation has none to deliver (invalid params), another tenant's or an unknown
    response is not found (naming the URI asked for)."""
    gateway = gateway_over(answering())
    run = await gateway.execute(Principal("acme"), CreateResponse(model="m", input=hello("hi")))
    await run.wait()
    surface = server.McpSurface(gateway)
    for tenant, kind, code in [
        ("acme", "conversations", INVALID_PARAMS),
        ("globex", "responses", INVALID_PARAMS),
    ]:
        uri = f"stateway://{tenant}/{kind}/{run.id}"
        with pytest.raises(MCPError) as refused:
            await surface._updates(Principal(tenant), uri)
        assert refused.value.code == code
        assert uri in refused.value.error.message
    unknown = "stateway://acme/responses/resp_unknown"
    with pytest.raises(MCPError) as missing:
        await surface._updates(Principal("acme"), unknown)
    assert missing.value.error.data == {"uri": unknown}
    assert await surface._updates(Principal("acme"), f"stateway://acme/responses/{run.id}")


def test_idle_sessions_are_closed_and_their_number_is_bounded() -> None:
    manager = server.McpSurface(cast(Gateway, object()))._manager
    assert manager.session_idle_timeout == server.SESSION_IDLE_TIMEOUT <= 300
    assert manager.max_sessions == limits.MAX_SESSIONS <= 1000


async def test_a_response_deleted_while_followed_is_its_last_change() -> None:
    """Its watch raises NotFound (deleted with no word reaching its run): the subscriber
    is told once more, reads the resource and finds it gone; nothing is raised into the
    session."""

    class Deleted:
        position = 1

        async def batches(self) -> AsyncIterator[tuple[list[bytes], bool]]:
            yield [b"{}"], False
            raise NotFound("Response with id 'r' was deleted while it was streamed.")

        def behind(self) -> int:
            return 0

    gateway, principal = cast(Gateway, None), Principal()
    updates = ResponseUpdates(gateway, principal, "r", cast(Watch, Deleted()))
    assert [change async for change in updates.changes()] == [None, None]


def counting(served: Served) -> list[str]:
    """The URIs the surface opened updates of, each time; every one follows its response
    for as long as the test lasts."""
    opened: list[str] = []

    async def updates(principal: Principal, uri: str) -> Endless:
        opened.append(uri)
        return Endless()

    served.surface._updates = updates  # type: ignore[method-assign,assignment]
    return opened


async def test_a_listen_stream_follows_a_uri_listed_twice_once() -> None:
    """One request names what a listen stream follows: each URI is followed once, however
    often it is listed (else one request could have the gateway read a response's state
    thousands of times over, every quarter of a second while it runs)."""
    async with serving(answering()) as served, Client(served.url) as client:
        await client.list_tools()  # the surface is started
        opened = counting(served)
        async with client.listen(resource_subscriptions=[URI, URI, URI]) as subscription:
            assert subscription.honored.resource_subscriptions == [URI]

    assert opened == [URI]


async def test_a_listen_stream_delivers_its_resources_updates() -> None:
    async with serving(answering()) as served, Client(served.url) as client:
        await client.list_tools()  # the surface is started
        response = following(served)
        async with client.listen(resource_subscriptions=[URI]) as subscription:
            response.change()
            event = await asyncio.wait_for(anext(aiter(subscription)), 30)  # not a hang

    assert event == ResourceUpdated(URI)


async def test_a_listen_stream_follows_the_callers_own_responses_only() -> None:
    async with serving(answering()) as served, Client(served.url) as client:
        created = await client.call_tool("create_response", {"model": "m", "input": "hi"})
        response_id = created.structured_content["id"]
        own = f"stateway://acme/responses/{response_id}"
        async with client.listen(resource_subscriptions=[own]) as subscription:
            assert subscription.honored.resource_subscriptions == [own]
        others = f"stateway://globex/responses/{response_id}"
        with pytest.raises(MCPError) as refused:
            async with client.listen(resource_subscriptions=[others]):
                pass
    assert refused.value.code == INVALID_PARAMS
    assert served.escaped == []


async def test_a_listen_stream_following_too_many_resources_is_refused() -> None:
    uris = [f"stateway://acme/responses/resp_{n}" for n in range(limits.MAX_LISTENED + 1)]
    async with serving(answering()) as served, Client(served.url) as client:
        await client.list_tools()
        opened = counting(served)
        with pytest.raises(MCPError) as refused:
            async with client.listen(resource_subscriptions=uris):
                pass
        async with client.listen(resource_subscriptions=uris[1:]) as subscription:
            assert len(subscription.honored.resource_subscriptions or ()) == len(uris) - 1

    assert refused.value.code == INVALID_PARAMS
    assert str(limits.MAX_LISTENED) in refused.value.error.message
    assert opened == uris[1:]  # the refused stream opened none


async def test_a_stream_resumed_after_an_event_id_is_opened_anew() -> None:
    """A 2025-11-25 client whose standalone GET stream dropped may ask for it again with
    ``Last-Event-ID`` (the spec's resumption). The gateway keeps no events to replay, so
    the stream is opened anew and carries the session's notifications from then on; the
    SDK, without an event store, answered nothing (uvicorn's 500)."""
    async with serving(answering()) as served, httpx2.AsyncClient() as http:
        session = await opened_session(http, served, "2025-11-25")
        response = following(served)
        resumed = {**session, "accept": "text/event-stream", "last-event-id": "some-event"}
        async with http.stream("GET", served.url, headers=resumed, timeout=30) as notifications:
            assert notifications.status_code == 200
            subscribe = call(2, "resources/subscribe", {"uri": URI})
            assert (await http.post(served.url, json=subscribe, headers=session)).is_success
            response.change()
            lines = notifications.aiter_lines()
            while "notifications/resources/updated" not in (line := await anext(lines)):
                pass
    assert URI in line  # which of the session's subscriptions changed
    assert served.escaped == []
