"""The MCP surface as an MCP host drives it: the official ``mcp`` SDK client over
Streamable HTTP on loopback, against the surface served by uvicorn in this process over
an in-memory gateway (so the test sees its sessions, its runs and its backend)."""

from __future__ import annotations

import asyncio
import ssl
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import httpx2
import mcp_types as types
import orjson
import pytest
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from starlette.types import Message, Receive, Scope, Send

from stateway.coordination.memory import MemoryCommandResults
from stateway.core.gateway import Gateway
from stateway.core.inference import Finish, TextDelta
from stateway.core.loop import Loop
from stateway.core.principal import Credential, Principal
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.serving import bind_socket, server_config, socket_url
from stateway.surfaces.auth.authenticator import IDENTITY, Identity
from stateway.surfaces.mcp import tools
from stateway.surfaces.mcp.limits import McpLimits
from stateway.surfaces.mcp.mount import McpMount
from stateway.surfaces.mcp.server import McpSurface
from tests.core.fakes import MemoryStore, ScriptedBackend

MODES = ["legacy", "auto"]
ACME = Identity(Principal("acme", "key_1", Credential.API_KEY), authenticated=True)


@dataclass
class Served:
    url: str
    mount: McpMount
    backend: ScriptedBackend
    identity: Identity
    """Who the requests act for from now on."""
    escaped: list[BaseException] = field(default_factory=list)
    """What the surface raised out of a request (to uvicorn: an unhandled error)."""
    holding: asyncio.Event | None = None
    """While set up, a request with ``x-hold`` waits for it as its answer starts
    (:attr:`held` is set then)."""
    held: asyncio.Event = field(default_factory=asyncio.Event)
    ended: dict[bytes, asyncio.Event] = field(default_factory=dict)
    """Set, by its ``x-tag``, once a tagged request's serving ended."""

    async def served_through(self, tag: bytes) -> None:
        """Wait until the request tagged ``tag`` was served to its end."""
        await asyncio.wait_for(self.ended.setdefault(tag, asyncio.Event()).wait(), 5)

    @property
    def surface(self) -> McpSurface:
        assert self.mount.started
        return self.mount._surface.result()  # type: ignore[union-attr]


@asynccontextmanager
async def serving(
    backend: ScriptedBackend, identity: Identity = ACME, limits: McpLimits | None = None
) -> AsyncIterator[Served]:
    """``/mcp`` over a gateway answering with ``backend``, every request as ``identity``
    (tenant acme)."""
    store = MemoryStore()
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    gateway = Gateway(store, router, Loop(store), RunRegistry(), results=MemoryCommandResults())
    mount = McpMount(gateway, "9.9.9", limits)

    sock = bind_socket("127.0.0.1", 0)
    served = Served(socket_url(sock) + "/mcp", mount, backend, identity)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        scope[IDENTITY] = served.identity
        if served.holding is not None and (b"x-hold", b"1") in scope["headers"]:
            send = holding(send, served.holding, served.held)
        try:
            await mount(scope, receive, send)
        except BaseException as exc:
            served.escaped.append(exc)
            raise
        finally:
            if (tag := dict(scope["headers"]).get(b"x-tag")) is not None:
                served.ended.setdefault(tag, asyncio.Event()).set()

    sock.listen(128)  # usable at once: early connections wait in the backlog
    server = uvicorn.Server(server_config(app, lifespan=False, graceful_shutdown=1))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield served
    finally:
        server.should_exit = True
        await task
        await mount.aclose()
        sock.close()


TLS = ssl.create_default_context()
"""Loaded once: the SDK's own HTTP client loads the CA bundle for each session it opens
(unused on loopback's plain HTTP), which took most of a short session's time."""


@asynccontextmanager
async def connected(url: str, mode: str) -> AsyncIterator[Client]:
    """An SDK client session on ``url``, as ``Client(url)`` opens it (its own HTTP client,
    closed with it, ending with its ``DELETE``; the SDK's timeouts), over :data:`TLS`."""
    timeout = httpx2.Timeout(30, read=300)
    async with (
        httpx2.AsyncClient(verify=TLS, timeout=timeout) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        yield client


def holding(send: Send, release: asyncio.Event, held: asyncio.Event) -> Send:
    """``send``, its answer's start held until ``release`` (``held`` set meanwhile)."""

    async def held_send(message: Message) -> None:
        if message["type"] == "http.response.start":
            held.set()
            await release.wait()
        await send(message)

    return held_send


def answering() -> ScriptedBackend:
    return ScriptedBackend([TextDelta("hello"), Finish("stop")])


def held(gate: asyncio.Event) -> ScriptedBackend:
    """A backend that answers once ``gate`` is set."""
    return ScriptedBackend([TextDelta("hello"), Finish("stop")], gate=gate)


@pytest.mark.parametrize("mode", MODES)
async def test_a_cancelled_create_stops_its_run(mode: str) -> None:
    """A call the client gives up on (2025-11-25: ``notifications/cancelled`` on its
    session, which Codex's sessions take; 2026-07-28: its request closed) ends the handler,
    and with it the response's run: the upstream request is closed."""
    async with serving(held(asyncio.Event())) as served, Client(served.url, mode=mode) as client:
        call = client.call_tool("create_response", {"model": "m", "input": "hi"})
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(call, 0.5)
        await asyncio.wait_for(served.backend.closed.wait(), 5)


async def test_a_call_whose_connection_drops_is_not_cancelled() -> None:
    """2025-11-25 (the sessions Codex opens): a call's connection dropping is no
    cancellation (the spec: a client cancels with ``notifications/cancelled``, and a
    disconnection should not be taken for one); its run goes on to its end. At
    2026-07-28, without a session, closing the request is the cancellation (above)."""
    gate = asyncio.Event()
    params = {"name": "create_response", "arguments": {"model": "m", "input": "hi"}}
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}
    async with serving(held(gate)) as served, httpx2.AsyncClient() as http:
        opened = await http.post(served.url, json=initialize("2025-11-25"), headers=ACCEPT)
        session = {**ACCEPT, "mcp-session-id": opened.headers["mcp-session-id"]}
        session["mcp-protocol-version"] = "2025-11-25"
        async with httpx2.AsyncClient() as caller:
            posted = caller.post(served.url, json=call, headers={**session, "x-tag": "call"})
            calling = asyncio.create_task(posted)
            await asyncio.wait_for(served.backend.started.wait(), 5)
            [run] = served.surface._gateway.runs
            calling.cancel()
        await served.served_through(b"call")
        gate.set()
        await asyncio.wait_for(run.wait(), 5)

    assert run.state.status == "completed"
    assert served.escaped == []


@pytest.mark.parametrize("mode", MODES)
async def test_a_cancelled_create_with_a_command_id_is_taken_over_by_its_retry(
    mode: str,
) -> None:
    """With a ``command_id`` a cancelled call cancels nothing: the run goes on, and a retry
    gets its result rather than running the command a second time."""
    gate = asyncio.Event()
    arguments = {"model": "m", "input": "hi", "command_id": "cmd-1"}
    async with serving(held(gate)) as served, Client(served.url, mode=mode) as client:
        first = client.call_tool("create_response", arguments)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(first, 0.5)
        assert not served.backend.closed.is_set()
        retry = asyncio.create_task(client.call_tool("create_response", arguments))
        await asyncio.sleep(0.2)
        gate.set()
        result = await asyncio.wait_for(retry, 5)

    assert not result.is_error
    assert result.structured_content["status"] == "completed"
    assert len(served.backend.requests) == 1


async def test_sessions_opened_and_closed_are_not_kept() -> None:
    async with serving(answering()) as served:
        async with Client(served.url, mode="legacy") as client:
            await client.list_tools()
        manager = served.surface._manager
        assert manager._server_instances == {}

        for _ in range(200):
            async with connected(served.url, "legacy") as client:
                await client.call_tool("get_response", {"response_id": "resp_x"})

        assert manager._server_instances == {}
        assert manager._session_owners == {}
        assert served.surface._subscriptions == {}


def text_of(content: list[Any]) -> str:
    [text] = [c for c in content if isinstance(c, types.TextContent)]
    return text.text


@pytest.mark.parametrize("mode", MODES)
async def test_a_tool_that_fails_unexpectedly_is_an_error_result_without_details(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not a JSON-RPC error carrying the exception's text (code 0 in the 2025 protocol):
    an ``isError`` result in the OpenAI shape, as a route's generic 500."""

    async def broken(*args: Any) -> Any:
        raise RuntimeError("connection string postgres://secret")

    monkeypatch.setitem(
        tools.TOOLS, "get_response", replace(tools.TOOLS["get_response"], run=broken)
    )
    async with serving(answering()) as served, Client(served.url, mode=mode) as client:
        result = await client.call_tool("get_response", {"response_id": "resp_1"})

    assert result.is_error
    assert result.structured_content["error"]["code"] == "internal_error"
    assert "secret" not in text_of(result.content)


@pytest.mark.parametrize("mode", MODES)
async def test_tools_are_annotated_with_what_they_do(mode: str) -> None:
    async with serving(answering()) as served, Client(served.url, mode=mode) as client:
        listed = {tool.name: tool.annotations for tool in (await client.list_tools()).tools}

    assert all(hints is not None for hints in listed.values())
    read_only = {name for name, hints in listed.items() if hints and hints.read_only_hint}
    assert read_only == {
        "get_response",
        "list_input_items",
        "get_conversation",
        "list_conversation_items",
        "get_conversation_item",
    }
    for name in ("delete_response", "delete_conversation", "delete_conversation_item"):
        hints = listed[name]
        assert hints is not None
        assert (hints.destructive_hint, hints.idempotent_hint) == (True, True)
    for name in ("create_conversation", "add_conversation_items"):
        hints = listed[name]
        assert hints is not None
        assert (hints.destructive_hint, hints.idempotent_hint) == (False, False)
    created = listed["create_response"]
    assert created is not None
    assert created.open_world_hint


async def test_a_response_result_links_its_resource_in_the_callers_tenant() -> None:
    """A client with an API key need not know its tenant to follow a response: the
    result links the URI to read or subscribe to."""
    async with serving(answering()) as served, Client(served.url, mode="legacy") as client:
        created = await client.call_tool("create_response", {"model": "m", "input": "hi"})
        response_id = created.structured_content["id"]
        links = [c for c in created.content if isinstance(c, types.ResourceLink)]
        assert [link.uri for link in links] == [f"stateway://acme/responses/{response_id}"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # resources/subscribe: deprecated as of 2026-07-28
            await client.subscribe_resource(links[0].uri)
        read = await client.read_resource(links[0].uri)
        assert response_id in read.contents[0].text  # type: ignore[union-attr]
        assert read.contents[0].mime_type == "application/json"

        conversation = await client.call_tool("create_conversation", {})
        listed = await client.call_tool("list_input_items", {"response_id": response_id})
    assert conversation.is_error  # this gateway keeps no conversations: nothing to link
    assert not [c for c in conversation.content if isinstance(c, types.ResourceLink)]
    assert not [c for c in listed.content if isinstance(c, types.ResourceLink)]


ACCEPT = {"accept": "application/json, text/event-stream"}


def initialize(version: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "host", "version": "1"},
        },
    }


async def opened_session(http: httpx2.AsyncClient, served: Served, version: str) -> dict[str, str]:
    """A session opened and initialized at ``version``: the headers its requests carry (a
    2025-03-26 client sends no ``mcp-protocol-version``: the header came with 2025-06-18)."""
    opened = await http.post(served.url, json=initialize(version), headers=ACCEPT)
    headers = {**ACCEPT, "mcp-session-id": opened.headers["mcp-session-id"]}
    if version != "2025-03-26":
        headers["mcp-protocol-version"] = version
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    await http.post(served.url, json=initialized, headers=headers)
    return headers


def sse_result(reply: httpx2.Response) -> dict[str, Any]:
    [data] = [line[5:] for line in reply.text.splitlines() if line.startswith("data:")]
    result: dict[str, Any] = orjson.loads(data)["result"]
    return result


@pytest.mark.parametrize(
    ("offered", "agreed"),
    [("2025-11-25", "2025-11-25"), ("2025-03-26", "2025-03-26"), ("1999-01-01", "2025-11-25")],
)
async def test_the_handshake_agrees_a_version_and_declares_what_is_served(
    offered: str, agreed: str
) -> None:
    async with serving(answering()) as served, httpx2.AsyncClient() as http:
        reply = await http.post(served.url, json=initialize(offered), headers=ACCEPT)
    result = sse_result(reply)

    assert result["protocolVersion"] == agreed
    assert result["serverInfo"] == {"name": "stateway", "version": "9.9.9"}
    assert result["capabilities"] == {
        "resources": {"subscribe": True, "listChanged": False},
        "tools": {"listChanged": False},
    }
    assert "stateway://" in result["instructions"]


@pytest.mark.parametrize("mode", MODES)
async def test_no_list_changes_are_declared_in_either_generation(mode: str) -> None:
    """The tools and templates are fixed and ``resources/list`` is empty: nothing would
    ever send ``notifications/*/list_changed`` (2026-07-28: a listen stream's events)."""
    async with serving(answering()) as served, Client(served.url, mode=mode) as client:
        capabilities = client.server_capabilities

    assert capabilities.tools is not None
    assert capabilities.resources is not None
    assert capabilities.tools.list_changed is False
    assert capabilities.resources.list_changed is False
    assert capabilities.resources.subscribe is True
    assert capabilities.prompts is None


@pytest.mark.parametrize(
    ("origin", "status"),
    [
        ("http://evil.example", 403),
        ("null", 403),
        ("http://127.0.0.1:1", 403),  # another port: another origin
        (None, 200),  # clients other than browsers send none
        ("same", 200),
    ],
)
async def test_a_request_from_another_sites_page_is_refused(
    origin: str | None, status: int
) -> None:
    """DNS rebinding protection, as the spec requires of servers: an ``Origin`` that is
    not the gateway's own is a 403, before anything is served."""
    async with serving(answering()) as served, httpx2.AsyncClient() as http:
        headers = dict(ACCEPT)
        if origin is not None:
            headers["origin"] = served.url.removesuffix("/mcp") if origin == "same" else origin
        reply = await http.post(served.url, json=initialize("2025-11-25"), headers=headers)

    assert reply.status_code == status
    if status == 403:
        assert reply.json()["error"]["code"] == "origin_not_allowed"
        assert served.surface._manager._server_instances == {}


async def test_a_deleted_or_unknown_session_is_not_found() -> None:
    async with serving(answering()) as served, httpx2.AsyncClient() as http:
        opened = await http.post(served.url, json=initialize("2025-11-25"), headers=ACCEPT)
        session = {**ACCEPT, "mcp-session-id": opened.headers["mcp-session-id"]}
        session["mcp-protocol-version"] = "2025-11-25"
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        assert (await http.post(served.url, json=listing, headers=session)).status_code == 200
        assert len(served.surface._manager._server_instances) == 1

        assert (await http.delete(served.url, headers=session)).status_code == 200
        assert (await http.post(served.url, json=listing, headers=session)).status_code == 404
        unknown = {**session, "mcp-session-id": "0" * 32}
        assert (await http.post(served.url, json=listing, headers=unknown)).status_code == 404
        assert served.surface._manager._server_instances == {}


async def test_a_notification_whose_session_ends_as_it_is_answered_raises_nothing() -> None:
    """A client ending its session (``DELETE``) while one of its notifications is being
    answered (a ``notifications/cancelled`` as it gives up on a call and closes): the
    SDK answers 202, finds the session closed as it hands the notification on, and
    answers again (a 500 after the 202). That is dropped, and nothing escapes to uvicorn
    as an unhandled error ("Exception in ASGI application")."""
    async with serving(answering()) as served, httpx2.AsyncClient() as http:
        opened = await http.post(served.url, json=initialize("2025-11-25"), headers=ACCEPT)
        session = {**ACCEPT, "mcp-session-id": opened.headers["mcp-session-id"]}
        session["mcp-protocol-version"] = "2025-11-25"
        served.holding = asyncio.Event()
        params = {"requestId": 7, "reason": "gave up"}
        cancelled = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}
        notified = asyncio.create_task(
            http.post(served.url, json=cancelled, headers={**session, "x-hold": "1"})
        )
        await asyncio.wait_for(served.held.wait(), 5)
        assert (await http.delete(served.url, headers=session)).status_code == 200
        served.holding.set()
        reply = await asyncio.wait_for(notified, 5)

    assert reply.status_code == 202
    assert served.escaped == []


async def test_a_session_is_not_found_by_a_token_whose_sub_is_its_keys_id() -> None:
    async with serving(answering()) as served, httpx2.AsyncClient() as http:
        opened = await http.post(served.url, json=initialize("2025-11-25"), headers=ACCEPT)
        session = {**ACCEPT, "mcp-session-id": opened.headers["mcp-session-id"]}
        session["mcp-protocol-version"] = "2025-11-25"
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        token = Principal("acme", "key_1", Credential.TOKEN)
        served.identity = Identity(token, authenticated=True)

        assert (await http.post(served.url, json=listing, headers=session)).status_code == 404
        served.identity = ACME
        assert (await http.post(served.url, json=listing, headers=session)).status_code == 200


@pytest.mark.parametrize("command_id", [None, "cmd_1"])
async def test_arguments_with_integers_beyond_64_bits_are_read_as_a_body_is(
    command_id: str | None,
) -> None:
    """As floats (the HTTP routes' parser reads them so): the tools pass their arguments
    on as JSON, which could not be written, and answered an internal error."""
    item = {"role": "user", "content": "hi", "n": 2**70}
    arguments: dict[str, Any] = {"model": "m", "input": [item]}
    if command_id is not None:
        arguments["command_id"] = command_id
    async with serving(answering()) as served, Client(served.url) as client:
        result = await client.call_tool("create_response", arguments)
    assert not result.is_error, text_of(result.content)
    assert result.structured_content["status"] == "completed"


async def test_an_argument_number_beyond_a_float_is_refused_as_a_body_is() -> None:
    item = {"role": "user", "content": "hi", "n": 10**400}
    async with serving(answering()) as served, Client(served.url) as client:
        result = await client.call_tool("create_response", {"model": "m", "input": [item]})
    assert result.is_error
    error = result.structured_content["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_arguments")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("listing", ["list_tools", "list_resources", "list_resource_templates"])
async def test_a_cursor_the_gateway_never_gave_is_invalid_params(mode: str, listing: str) -> None:
    """Every listing fits one page (no ``nextCursor``), so any cursor is one the gateway
    never gave: the spec's pagination has that answered -32602, not the first page again
    (a client paging on would list the same tools twice)."""
    async with serving(answering()) as served, Client(served.url, mode=mode) as client:
        with pytest.raises(MCPError) as refused:
            await getattr(client, listing)(cursor="c2")
        assert refused.value.code == types.INVALID_PARAMS
        assert refused.value.error.message.startswith("Invalid cursor")
        assert (await getattr(client, listing)()).next_cursor is None
        assert (await getattr(client, listing)(cursor="")).next_cursor is None


async def test_a_call_takes_its_tools_schema_without_listing_the_tools(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At 2026-07-28 the SDK checks a call's ``Mcp-Param-*`` headers against its tool's
    input schema: given by the surface, not found by serving ``tools/list`` once more for
    every call (which took ~40% of a short call's time)."""
    listed: list[object] = []
    list_tools = McpSurface._list_tools

    async def counted(self: McpSurface, ctx: Any, params: Any) -> types.ListToolsResult:
        listed.append(params)
        return await list_tools(self, ctx, params)

    monkeypatch.setattr(McpSurface, "_list_tools", counted)
    async with serving(answering()) as served, Client(served.url, mode="auto") as client:
        [schema] = [
            t.input_schema for t in (await client.list_tools()).tools if t.name == "get_response"
        ]
        listed.clear()
        result = await client.call_tool("get_response", {"response_id": "resp_x"})
        lookup = served.surface._manager.app.get_tool_input_schema

    assert result.is_error  # no such response: the call ran
    assert listed == []
    assert lookup is not None
    assert lookup("get_response") == schema
    assert lookup("nope") is None


@pytest.mark.parametrize("mode", MODES)
async def test_input_items_past_the_routes_bound_are_refused_before_they_are_read(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``create_response`` takes at most ``[server] max_input_items`` items (and ten
    content parts for each), counted before its arguments are read, as the route counts
    a body's; the other tools' items are bounded by their own decoders."""
    read: list[object] = []
    monkeypatch.setattr("stateway.surfaces.mcp.tool_calls.as_parsed", read.append)
    messages = [{"role": "user", "content": "m"}] * 4
    parts = [{"role": "user", "content": [{"type": "input_text", "text": "m"}] * 31}]
    limits = McpLimits(max_input_items=3)
    async with (
        serving(answering(), limits=limits) as served,
        Client(served.url, mode=mode) as client,
    ):
        for given in (messages, parts):
            refused = await client.call_tool("create_response", {"model": "m", "input": given})
            assert refused.is_error
            error = refused.structured_content["error"]
            assert (error["param"], error["code"]) == ("input", "array_above_max_length")
    assert read == []
    assert served.backend.requests == []
