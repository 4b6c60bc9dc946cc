"""Tenant isolation end to end, on SQLite and PostgreSQL: two tenants, each with an API
key, and every route and MCP command that names an id walked with the other tenant's
key. Another tenant's id must get exactly the answer a missing id of the same shape gets
(status, type, code, param, message, with the id itself masked), nothing it does may
change the owner's objects, and its own requests with the same command ids run apart.
WebSocket frames naming an id (``previous_response_id``, ``response.resume``, a
``conversation``, an ``item_reference``) too."""

from __future__ import annotations

import json
import time
import uuid
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx2
import mcp_types as types
import openai
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from websockets.asyncio.client import connect as websocket_connect

from tests.e2e.authenticated import AuthGateway, auth_gateway, create_key

MODEL = "fake-model"
SLOW = "[[slow:100]] [[words:60]]"


@dataclass(frozen=True)
class Tenants:
    gateway: AuthGateway
    alice: str
    """Tenant A's key: it owns the objects."""
    bob: str
    """Tenant B's key: it probes them."""
    alice_tenant: str
    bob_tenant: str


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def tenants(
    request: pytest.FixtureRequest, fake_upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Tenants]:
    directory = tmp_path_factory.mktemp("tenants")
    if request.param == "sqlite":
        database = f"sqlite:///{directory / 'stateway.db'}"
    else:
        database = request.getfixturevalue("postgres_url")
    suffix = uuid.uuid4().hex[:8]
    with auth_gateway(directory, fake_upstream, database) as gateway:
        alice, bob = f"alice-{suffix}", f"bob-{suffix}"
        yield Tenants(gateway, create_key(database, alice), create_key(database, bob), alice, bob)


@dataclass(frozen=True)
class Owned:
    """Tenant A's objects."""

    response: str
    background: str
    conversation: str
    item: str


def sdk(tenants: Tenants, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=tenants.gateway.url + "/v1", api_key=key, max_retries=0)


def ended(client: openai.OpenAI, response_id: str) -> None:
    deadline = time.monotonic() + 60
    while client.responses.retrieve(response_id).status in ("queued", "in_progress"):
        assert time.monotonic() < deadline
        time.sleep(0.05)


@pytest.fixture(scope="module")
def owned(tenants: Tenants) -> Owned:
    with sdk(tenants, tenants.alice) as alice:
        response = alice.responses.create(model=MODEL, input="hello [[words:3]]")
        background = alice.responses.create(model=MODEL, input="later [[words:5]]", background=True)
        ended(alice, background.id)
        conversation = alice.conversations.create(
            items=[{"type": "message", "role": "user", "content": "remember this"}]
        )
        item = alice.conversations.items.list(conversation.id).data[0].id
    assert item is not None
    return Owned(response.id, background.id, conversation.id, item)


def same_shape(object_id: str) -> str:
    """A missing id shaped like ``object_id``: its prefix, random hex of its length."""
    prefix, _, rest = object_id.rpartition("_")
    random = (uuid.uuid4().hex * 4)[: len(rest)]
    return f"{prefix}_{random}" if prefix else random


def masked(answer: httpx2.Response, *ids: str) -> tuple[int, Any]:
    text = answer.text
    for object_id in ids:
        text = text.replace(object_id, "<id>")
    return answer.status_code, text


Probe = Callable[[httpx2.Client, str], httpx2.Response]


def probes(owned: Owned) -> dict[str, tuple[str, Probe]]:
    """Each route naming an id: (which of A's ids it names, how B asks)."""
    conv, item = owned.conversation, owned.item

    def body(**fields: Any) -> dict[str, Any]:
        return {"model": MODEL, "input": "hi", **fields}

    return {
        "retrieve": ("response", lambda c, i: c.get(f"/v1/responses/{i}")),
        "retrieve with includes": (
            "response",
            lambda c, i: c.get(f"/v1/responses/{i}?include[]=message.output_text.logprobs"),
        ),
        "delete": ("response", lambda c, i: c.delete(f"/v1/responses/{i}")),
        "input items": ("response", lambda c, i: c.get(f"/v1/responses/{i}/input_items")),
        "input items after a cursor": (
            "response",
            lambda c, i: c.get(f"/v1/responses/{i}/input_items?after=msg_x&order=asc"),
        ),
        "cancel": ("background", lambda c, i: c.post(f"/v1/responses/{i}/cancel")),
        "watch": ("background", lambda c, i: c.get(f"/v1/responses/{i}?stream=true")),
        "resume": (
            "background",
            lambda c, i: c.get(f"/v1/responses/{i}?stream=true&starting_after=2"),
        ),
        "continue": (
            "response",
            lambda c, i: c.post("/v1/responses", json=body(previous_response_id=i)),
        ),
        "continue streamed": (
            "response",
            lambda c, i: c.post("/v1/responses", json=body(previous_response_id=i, stream=True)),
        ),
        "continue in background": (
            "response",
            lambda c, i: c.post(
                "/v1/responses", json=body(previous_response_id=i, background=True)
            ),
        ),
        "turn": ("conversation", lambda c, i: c.post("/v1/responses", json=body(conversation=i))),
        "turn named by an object": (
            "conversation",
            lambda c, i: c.post("/v1/responses", json=body(conversation={"id": i})),
        ),
        "turn in background": (
            "conversation",
            lambda c, i: c.post("/v1/responses", json=body(conversation=i, background=True)),
        ),
        "prewarm": (
            "response",
            lambda c, i: c.post(
                "/v1/responses",
                json=body(previous_response_id=i, prompt_cache_options={"prewarm": True}),
            ),
        ),
        "count tokens": (
            "response",
            lambda c, i: c.post("/v1/responses/input_tokens", json=body(previous_response_id=i)),
        ),
        "count tokens of a turn": (
            "conversation",
            lambda c, i: c.post("/v1/responses/input_tokens", json=body(conversation=i)),
        ),
        "streamed turn": (
            "conversation",
            lambda c, i: c.post("/v1/responses", json=body(conversation=i, stream=True)),
        ),
        "compact": (
            "response",
            lambda c, i: c.post("/v1/responses/compact", json=body(previous_response_id=i)),
        ),
        "conversation": ("conversation", lambda c, i: c.get(f"/v1/conversations/{i}")),
        "update conversation": (
            "conversation",
            lambda c, i: c.post(f"/v1/conversations/{i}", json={"metadata": {"x": "y"}}),
        ),
        "delete conversation": ("conversation", lambda c, i: c.delete(f"/v1/conversations/{i}")),
        "list items": ("conversation", lambda c, i: c.get(f"/v1/conversations/{i}/items")),
        "add items": (
            "conversation",
            lambda c, i: c.post(
                f"/v1/conversations/{i}/items",
                json={"items": [{"type": "message", "role": "user", "content": "x"}]},
            ),
        ),
        "item": ("conversation", lambda c, i: c.get(f"/v1/conversations/{i}/items/{item}")),
        "delete item": (
            "conversation",
            lambda c, i: c.delete(f"/v1/conversations/{i}/items/{item}"),
        ),
        "item by id": ("item", lambda c, i: c.get(f"/v1/conversations/{conv}/items/{i}")),
        "item reference": ("item", lambda c, i: c.post("/v1/responses", json=referring(i))),
        "item reference streamed": (
            "item",
            lambda c, i: c.post("/v1/responses", json={**referring(i), "stream": True}),
        ),
        "item reference in background": (
            "item",
            lambda c, i: c.post("/v1/responses", json={**referring(i), "background": True}),
        ),
        "item reference counted": (
            "item",
            lambda c, i: c.post("/v1/responses/input_tokens", json=referring(i)),
        ),
        "item reference compacted": (
            "item",
            lambda c, i: c.post("/v1/responses/compact", json=referring(i)),
        ),
        "item reference added to one's own conversation": (
            "item",
            lambda c, i: c.post(
                f"/v1/conversations/{c.post('/v1/conversations', json={}).json()['id']}/items",
                json={"items": [reference(i)]},
            ),
        ),
        "response named as an item": (
            "response",
            lambda c, i: c.post("/v1/responses", json=referring(i)),
        ),
        "item reference in a new conversation": (
            "item",
            lambda c, i: c.post("/v1/conversations", json={"items": [reference(i)]}),
        ),
        "delete item by id": (
            "item",
            lambda c, i: c.delete(f"/v1/conversations/{conv}/items/{i}"),
        ),
    }


def reference(item_id: str) -> dict[str, str]:
    return {"type": "item_reference", "id": item_id}


def referring(item_id: str) -> dict[str, Any]:
    """A create whose input is a reference to ``item_id``, then an echo."""
    echo = {"type": "message", "role": "user", "content": "[[echo]]"}
    return {"model": MODEL, "input": [reference(item_id), echo]}


def client(tenants: Tenants, key: str) -> httpx2.Client:
    headers = {"authorization": f"Bearer {key}"}
    return httpx2.Client(base_url=tenants.gateway.url, headers=headers, timeout=60)


PROBES = list(probes(Owned("resp_x", "resp_y", "conv_z", "msg_w")))


@pytest.mark.parametrize("probe", PROBES)
def test_another_tenants_id_is_answered_as_a_missing_one(
    tenants: Tenants, owned: Owned, probe: str
) -> None:
    which, ask = probes(owned)[probe]
    theirs = getattr(owned, which)
    missing = same_shape(theirs)

    with client(tenants, tenants.bob) as bob:
        foreign = masked(ask(bob, theirs), theirs)
        unknown = masked(ask(bob, missing), missing)

    assert foreign == unknown
    assert foreign[0] in (400, 404), foreign


def test_an_item_reference_finds_the_owners_conversation_item(
    tenants: Tenants, owned: Owned
) -> None:
    """What makes the probes naming ``owned.item`` by reference meaningful: the owner's
    reference finds the item."""
    with client(tenants, tenants.alice) as alice:
        answer = alice.post("/v1/responses", json=referring(owned.item))
    assert answer.status_code == 200, answer.text
    assert answer.json()["output"][0]["content"][0]["text"].splitlines()[0] == (
        "user: remember this"
    )


def test_a_running_background_response_is_hidden_from_another_tenant(tenants: Tenants) -> None:
    with sdk(tenants, tenants.alice) as alice, client(tenants, tenants.bob) as bob:
        running = alice.responses.create(model=MODEL, input=f"slow {SLOW}", background=True)
        missing = same_shape(running.id)
        for ask in (
            lambda i: bob.get(f"/v1/responses/{i}"),
            lambda i: bob.get(f"/v1/responses/{i}?stream=true&starting_after=0"),
            lambda i: bob.post(f"/v1/responses/{i}/cancel"),
            lambda i: bob.delete(f"/v1/responses/{i}"),
        ):
            assert masked(ask(running.id), running.id) == masked(ask(missing), missing)
        ended(alice, running.id)
        assert alice.responses.retrieve(running.id).status == "completed"


def test_nothing_another_tenant_did_changed_the_owners_objects(
    tenants: Tenants, owned: Owned
) -> None:
    for probe in PROBES:  # every write above, once more
        which, ask = probes(owned)[probe]
        with client(tenants, tenants.bob) as bob:
            ask(bob, getattr(owned, which))

    with sdk(tenants, tenants.alice) as alice:
        assert alice.responses.retrieve(owned.response).status == "completed"
        assert alice.responses.retrieve(owned.background).status == "completed"
        conversation = alice.conversations.retrieve(owned.conversation)
        assert conversation.metadata in ({}, None)
        items = alice.conversations.items.list(owned.conversation).data
        assert [item.id for item in items] == [owned.item]


def test_the_same_idempotency_key_runs_apart_for_each_tenant(tenants: Tenants) -> None:
    key = {"idempotency-key": uuid.uuid4().hex}
    with client(tenants, tenants.alice) as alice, client(tenants, tenants.bob) as bob:
        first = alice.post("/v1/conversations", json={}, headers=key)
        again = alice.post("/v1/conversations", json={}, headers=key)
        other = bob.post("/v1/conversations", json={}, headers=key)
        assert first.status_code == other.status_code == 200
        assert again.json()["id"] == first.json()["id"]
        assert other.json()["id"] != first.json()["id"]
        foreign = bob.get(f"/v1/conversations/{first.json()['id']}")
        assert foreign.status_code == 404


@asynccontextmanager
async def mcp_as(tenants: Tenants, key: str, mode: str = "auto") -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(
        headers={"authorization": f"Bearer {key}"},
        timeout=httpx2.Timeout(30.0, read=300.0),
    )
    async with (
        http,
        Client(
            streamable_http_client(tenants.gateway.url + "/mcp", http_client=http), mode=mode
        ) as session,
    ):
        yield session


MCP_CALLS: list[tuple[str, str, Callable[[str, Owned], dict[str, Any]]]] = [
    ("get_response", "response", lambda i, o: {"response_id": i}),
    ("cancel_response", "background", lambda i, o: {"response_id": i}),
    ("delete_response", "response", lambda i, o: {"response_id": i}),
    ("list_input_items", "response", lambda i, o: {"response_id": i}),
    (
        "create_response",
        "response",
        lambda i, o: {"model": MODEL, "input": "x", "previous_response_id": i},
    ),
    ("get_conversation", "conversation", lambda i, o: {"conversation_id": i}),
    (
        "update_conversation",
        "conversation",
        lambda i, o: {"conversation_id": i, "metadata": {"a": "b"}},
    ),
    ("delete_conversation", "conversation", lambda i, o: {"conversation_id": i}),
    (
        "add_conversation_items",
        "conversation",
        lambda i, o: {
            "conversation_id": i,
            "items": [{"type": "message", "role": "user", "content": "x"}],
        },
    ),
    ("list_conversation_items", "conversation", lambda i, o: {"conversation_id": i}),
    (
        "get_conversation_item",
        "item",
        lambda i, o: {"conversation_id": o.conversation, "item_id": i},
    ),
    (
        "delete_conversation_item",
        "item",
        lambda i, o: {"conversation_id": o.conversation, "item_id": i},
    ),
]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_mcp_tools_answer_another_tenants_id_as_a_missing_one(
    tenants: Tenants, owned: Owned, mode: str
) -> None:
    async with mcp_as(tenants, tenants.bob, mode) as bob:
        for tool, which, arguments in MCP_CALLS:
            theirs = getattr(owned, which)
            missing = same_shape(theirs)
            foreign = await bob.call_tool(tool, arguments(theirs, owned))
            unknown = await bob.call_tool(tool, arguments(missing, owned))
            assert foreign.is_error, tool
            assert unknown.is_error, tool
            assert _masked(foreign.structured_content, theirs) == _masked(
                unknown.structured_content, missing
            ), tool


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_mcp_resources_of_another_tenant_are_not_found(
    tenants: Tenants, owned: Owned, mode: str
) -> None:
    missing = same_shape(owned.response)
    async with mcp_as(tenants, tenants.bob, mode) as bob:
        for tenant in (tenants.alice_tenant, tenants.bob_tenant):
            answers = []
            for response_id in (owned.response, missing):
                uri = f"stateway://{tenant}/responses/{response_id}"
                with pytest.raises(MCPError) as caught:
                    await bob.read_resource(uri)
                assert caught.value.code == types.INVALID_PARAMS
                answers.append(caught.value.error.message.replace(response_id, "<id>"))
            assert answers[0] == answers[1]
    async with mcp_as(tenants, tenants.alice, mode) as alice:
        uri = f"stateway://{tenants.alice_tenant}/responses/{owned.response}"
        assert (await alice.read_resource(uri)).contents


async def test_mcp_subscriptions_to_another_tenants_response_are_refused_alike(
    tenants: Tenants, owned: Owned
) -> None:
    missing = same_shape(owned.background)
    answers = []
    async with mcp_as(tenants, tenants.bob, "legacy") as bob:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # resources/subscribe: deprecated as of 2026-07-28
            for response_id in (owned.background, missing):
                for tenant in (tenants.alice_tenant, tenants.bob_tenant):
                    uri = f"stateway://{tenant}/responses/{response_id}"
                    with pytest.raises(MCPError) as caught:
                        await bob.subscribe_resource(uri)
                    answers.append(caught.value.error.message.replace(response_id, "<id>"))
    assert answers[:2] == answers[2:]


def test_an_mcp_session_is_bound_to_the_key_that_opened_it(tenants: Tenants) -> None:
    url = tenants.gateway.url + "/mcp"
    accept = {"accept": "application/json, text/event-stream"}

    def as_(key: str, session: str | None = None) -> dict[str, str]:
        headers = {**accept, "authorization": f"Bearer {key}"}
        if session is not None:
            headers |= {"mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
        return headers

    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "isolation-test", "version": "1"},
        },
    }
    opened = httpx2.post(url, json=initialize, headers=as_(tenants.alice))
    assert opened.status_code == 200
    session = opened.headers["mcp-session-id"]
    ready = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert httpx2.post(url, json=ready, headers=as_(tenants.alice, session)).status_code == 202
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}

    assert httpx2.post(url, json=listing, headers=as_(tenants.alice, session)).status_code == 200
    assert httpx2.post(url, json=listing, headers=as_(tenants.bob, session)).status_code == 404


def _masked(content: Any, object_id: str) -> str:
    return repr(content).replace(object_id, "<id>")


async def ws_error(tenants: Tenants, key: str, frame: dict[str, Any]) -> dict[str, Any]:
    """The first frame a WebSocket opened with ``key`` gets for ``frame``."""
    url = tenants.gateway.url.replace("http://", "ws://") + "/v1/responses"
    headers = {"Authorization": f"Bearer {key}"}
    async with websocket_connect(url, additional_headers=headers) as socket:
        await socket.send(json.dumps(frame))
        answer: dict[str, Any] = json.loads(await socket.recv())
    return answer


@pytest.mark.parametrize(
    "field", ["previous_response_id", "response_id", "conversation", "item_reference"]
)
async def test_websocket_frames_answer_another_tenants_id_as_a_missing_one(
    tenants: Tenants, owned: Owned, field: str
) -> None:
    def frame(object_id: str) -> dict[str, Any]:
        if field == "response_id":
            return {"type": "response.resume", "response_id": object_id}
        if field == "item_reference":
            return {"type": "response.create", **referring(object_id)}
        return {"type": "response.create", "model": MODEL, "input": "x", field: object_id}

    which = {"conversation": owned.conversation, "item_reference": owned.item}
    named = which.get(field, owned.response)
    missing = same_shape(named)
    theirs = await ws_error(tenants, tenants.bob, frame(named))
    absent = await ws_error(tenants, tenants.bob, frame(missing))
    assert theirs["type"] == "error"
    assert theirs["error"]["code"] in ("previous_response_not_found", "not_found")
    assert _masked(theirs, named) == _masked(absent, missing)
    mine = await ws_error(tenants, tenants.alice, frame(which.get(field, owned.background)))
    assert mine["type"] != "error"  # the owner's socket reaches it
