"""The HTTP surface in process: routing, the error boundary, and fuzzed requests."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.types import Receive, Scope, Send

from stateway.coordination.memory import MemoryCommandResults
from stateway.coordination.redis import RedisCommandResults
from stateway.coordination.redis import connect as connect_redis
from stateway.core.coordination import CommandResults
from stateway.core.errors import StorageError
from stateway.core.gateway import Gateway
from stateway.core.inference import Finish, TextDelta
from stateway.core.loop import Loop
from stateway.core.ports import ResponseStore
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.storage.sql import SqlConversationStore, SqlResponseStore, migrate, open_store
from stateway.surfaces.http.app import build_http_app
from stateway.surfaces.http.conversations import ConversationsRoutes
from stateway.surfaces.http.responses import ResponsesRoutes
from stateway.surfaces.http.service import ServiceRoutes
from tests.core.fakes import MemoryStore, ScriptedBackend
from tests.protocols.responses.test_decode import plausible_request, request_like
from tests.storage.test_locked_database import locked, shorten_waits
from tests.storage.test_unwritable_database import (
    BIG,
    ballasted,
    free_space,
    full_disk,
    read_only_file,
)
from tests.surfaces.http.asgi import call


def build(store: ResponseStore | None = None, *, max_body: int = 4096) -> Starlette:
    store = store or MemoryStore()
    backend = ScriptedBackend([TextDelta("ok"), Finish("stop")])
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    gateway = Gateway(store, router, Loop(store), RunRegistry())
    return build_http_app(ResponsesRoutes(gateway, max_body), ServiceRoutes(gateway))


async def test_create_then_get_in_process() -> None:
    app = build()
    created = await call(app, "POST", "/v1/responses", b'{"model": "m", "input": "hi"}')
    assert created.status == 200
    assert created.headers["content-type"] == "application/json"
    response_id = created.json()["id"]
    fetched = await call(app, "GET", f"/v1/responses/{response_id}")
    assert fetched.json()["output"][0]["content"][0]["text"] == "ok"
    items = await call(app, "GET", f"/v1/responses/{response_id}/input_items", query="limit=1")
    assert items.json()["object"] == "list"


async def test_stream_is_sse() -> None:
    reply = await call(
        build(), "POST", "/v1/responses", b'{"model": "m", "input": "hi", "stream": true}'
    )
    assert reply.status == 200
    assert reply.headers["content-type"].startswith("text/event-stream")
    frames = reply.body.split(b"\n\n")[:-1]
    assert frames[-1].startswith(b"event: response.completed\n")


async def test_error_boundary_shapes() -> None:
    app = build()
    for method, path, body, status in [
        ("POST", "/v1/responses", b"{", 400),
        ("POST", "/v1/responses", b'{"model": "m", "input": "' + b"x" * 5000 + b'"}', 413),
        ("GET", "/v1/responses/resp_missing", b"", 404),
        ("DELETE", "/v1/responses/resp_missing", b"", 404),
        ("GET", "/v1/responses/resp_missing/input_items", b"", 404),
        ("GET", "/v1/responses/resp_1/input_items?limit=0", b"", 400),
        ("GET", "/nope", b"", 404),
        ("PATCH", "/v1/responses", b"", 405),
        ("GET", "/v1/responses/resp_1?stream=true", b"", 404),
        ("GET", "/v1/responses/resp_1?stream=true&starting_after=-1", b"", 400),
        ("GET", "/v1/responses/resp_1?stream=true&starting_after=x", b"", 400),
        ("POST", "/v1/responses/resp_missing/cancel", b"", 404),
    ]:
        path, _, query = path.partition("?")
        reply = await call(app, method, path, body, query)
        assert reply.status == status, (method, path, reply.body)
        assert set(reply.json()["error"]) == {"message", "type", "param", "code"}
        assert reply.json()["error"]["code"] is not None, (method, path)


@pytest.fixture(scope="module")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'stateway.db'}"
    asyncio.run(migrate(url))
    return url


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.one_of(request_like, plausible_request))
def test_fuzzed_requests_never_get_a_5xx(sqlite_url: str, body: dict[str, object]) -> None:
    """Through the real SQL store, so whatever is accepted is also serialized and saved."""
    raw = json.dumps(body).encode()

    async def attempt() -> None:
        store = open_store(sqlite_url)
        try:
            reply = await call(build(store), "POST", "/v1/responses", raw)
        finally:
            await store.aclose()
        assert reply.status < 500, reply.body
        if reply.status >= 400:
            assert set(orjson.loads(reply.body)["error"]) == {"message", "type", "param", "code"}
        elif reply.headers["content-type"].startswith("text/event-stream"):
            assert reply.body.split(b"\n\n")[-2].startswith(b"event: response.completed\n")
        else:
            assert reply.json()["status"] == "completed", reply.body

    asyncio.run(attempt())


class DownStore(MemoryStore):
    async def ping(self) -> None:
        raise StorageError("Storage failed while checking the database.")


async def test_health_answers_ok() -> None:
    reply = await call(build(), "GET", "/health", content_type=None)
    assert (reply.status, reply.json()) == (200, {"status": "ok"})


async def test_ready_reports_storage_and_upstreams() -> None:
    reply = await call(build(), "GET", "/ready")
    assert reply.status == 200
    assert reply.json() == {
        "status": "ready",
        "storage": "ok",
        "upstreams": {"scripted": "reachable"},
    }

    store = DownStore()
    backend = ScriptedBackend([])
    gateway = Gateway(
        store, Router([BackendEntry(backend, {}, catch_all=True)]), Loop(store), RunRegistry()
    )
    down = await call(
        build_http_app(ResponsesRoutes(gateway, 4096), ServiceRoutes(gateway)), "GET", "/ready"
    )
    assert down.status == 503
    assert down.json()["status"] == "not_ready"
    assert down.json()["storage"] == "Storage failed while checking the database."


async def test_a_full_database_fails_stored_requests_and_readiness_naming_it(
    tmp_path: Path,
) -> None:
    """The database answers reads but has no room to write (a full disk): what must be
    stored fails naming why, ``/ready`` takes the gateway out of its load balancer naming
    it too, and puts it back by itself once space is freed (no request needed)."""
    path = tmp_path / "stateway.db"
    await ballasted(path)
    big = orjson.dumps({"model": "m", "input": BIG})
    with full_disk(path):
        store = open_store(f"sqlite:///{path}")
        try:
            app = build(store, max_body=1 << 20)
            refused = await call(app, "POST", "/v1/responses", big)
            assert refused.status == 503, refused.body
            assert refused.json()["error"] == {
                "message": "The response could not be stored. The database is out of space"
                " (its disk is full, or it reached its size limit).",
                "type": "server_error",
                "param": None,
                "code": "storage_full",
            }
            streamed = await call(app, "POST", "/v1/responses", big[:-1] + b', "stream": true}')
            assert streamed.status == 503  # its in-progress row failed: no event went out
            assert streamed.json()["error"] == refused.json()["error"]

            down = await call(app, "GET", "/ready")
            assert down.status == 503
            assert down.json()["status"] == "not_ready"
            assert "out of space" in down.json()["storage"]

            free_space(path)
            up = await call(app, "GET", "/ready")
            assert (up.status, up.json()["storage"]) == (200, "ok")
            stored = await call(app, "POST", "/v1/responses", big)
            assert stored.json()["status"] == "completed", stored.body
        finally:
            await store.aclose()


async def test_a_database_another_process_locks_fails_stored_requests_and_readiness(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SQLite file another process holds locked: a stored request waits SQLite's busy
    timeout, then is a 503 naming the lock, and ``/ready`` answers 503 naming it too,
    within its own time, until the lock is let go; an unstored request is served."""
    shorten_waits(monkeypatch)
    path = tmp_path / "stateway.db"
    await migrate(f"sqlite:///{path}")
    store = open_store(f"sqlite:///{path}")
    try:
        app = build(store)
        with locked(path):
            refused = await call(app, "POST", "/v1/responses", b'{"model": "m", "input": "hi"}')
            assert refused.status == 503, refused.body
            assert refused.json()["error"] == {
                "message": "The response could not be stored. The database is locked by another"
                " process (a write waited for its lock past SQLite's busy timeout).",
                "type": "server_error",
                "param": None,
                "code": "storage_unavailable",
            }
            down = await call(app, "GET", "/ready")
            assert down.status == 503
            assert down.json()["storage"] == (
                "Storage failed while checking the database. The database is locked by another"
                " process (a write waited for its lock past SQLite's busy timeout)."
            )
            unstored = b'{"model": "m", "input": "hi", "store": false}'
            served = await call(app, "POST", "/v1/responses", unstored)
            assert served.json()["status"] == "completed", served.body

        up = await call(app, "GET", "/ready")
        assert (up.status, up.json()["storage"]) == (200, "ok")
        stored = await call(app, "POST", "/v1/responses", b'{"model": "m", "input": "hi"}')
        assert stored.json()["status"] == "completed", stored.body
    finally:
        await store.aclose()


def with_conversations(store: SqlResponseStore) -> Starlette:
    backend = ScriptedBackend([TextDelta("ok"), Finish("stop")])
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    conversations = SqlConversationStore(store)
    gateway = Gateway(store, router, Loop(store), RunRegistry(), conversations=conversations)
    return build_http_app(
        ResponsesRoutes(gateway, 4096),
        ServiceRoutes(gateway),
        conversations=ConversationsRoutes(gateway, 4096),
    )


async def test_a_read_only_database_fails_conversation_writes_and_readiness_naming_it(
    tmp_path: Path,
) -> None:
    """A conversation's writes are not saves of a response, yet one refused as read-only
    (the gateway started while its SQLite file could not be written) answers 503 naming
    it, and takes the gateway out of its load balancer as a refused save does, until the
    file can be written again."""
    path = tmp_path / "stateway.db"
    await ballasted(path)
    writable = open_store(f"sqlite:///{path}")
    try:
        created = await call(with_conversations(writable), "POST", "/v1/conversations", b"{}")
    finally:
        await writable.aclose()
    conversation = f"/v1/conversations/{created.json()['id']}"
    items = orjson.dumps({"items": [{"role": "user", "content": "hi"}]})
    metadata = orjson.dumps({"metadata": {"topic": "tea"}})

    store = open_store(f"sqlite:///{path}")
    try:
        app = with_conversations(store)
        with read_only_file(path):
            for target, body, action in [
                (conversation + "/items", items, "adding conversation items"),
                (conversation, metadata, "updating a conversation"),
            ]:
                refused = await call(app, "POST", target, body)
                assert refused.status == 503, refused.body
                assert refused.json()["error"] == {
                    "message": f"Storage failed while {action}. The database is read-only"
                    " (a standby server, as after a failover, a database set read-only, or a"
                    " database file, or the directory holding it, the gateway cannot write).",
                    "type": "server_error",
                    "param": None,
                    "code": "storage_read_only",
                }
            down = await call(app, "GET", "/ready")
            assert down.status == 503
            assert "read-only" in down.json()["storage"]

        up = await call(app, "GET", "/ready")
        assert (up.status, up.json()["storage"]) == (200, "ok")
        added = await call(app, "POST", conversation + "/items", items)
        assert added.status == 200, added.body
    finally:
        await store.aclose()


def served_with(results: CommandResults) -> Starlette:
    store = MemoryStore()
    router = Router([BackendEntry(ScriptedBackend([]), {}, catch_all=True)])
    gateway = Gateway(store, router, Loop(store), RunRegistry(), results=results)
    return build_http_app(ResponsesRoutes(gateway, 4096), ServiceRoutes(gateway))


async def test_ready_reports_redis_down_and_stays_ready() -> None:
    """Every replica shares Redis: its outage fails keyed requests only, so readiness
    reports it rather than taking every replica out of the load balancer at once."""
    with socket.socket() as closed:  # bound, never listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        results = RedisCommandResults(connect_redis(f"redis://127.0.0.1:{port}/0"))
        try:
            reply = await call(served_with(results), "GET", "/ready")
        finally:
            await results.aclose()
    assert reply.status == 200
    assert reply.json()["status"] == "ready"
    assert reply.json()["coordination"] == "The coordination store (Redis) is unavailable."


@pytest.mark.redis
async def test_ready_reports_redis_answering(redis_url: str) -> None:
    results = RedisCommandResults(connect_redis(redis_url))
    try:
        reply = await call(served_with(results), "GET", "/ready")
    finally:
        await results.aclose()
    assert (reply.status, reply.json()["coordination"]) == (200, "ok")


async def test_ready_reports_no_coordination_in_process() -> None:
    reply = await call(served_with(MemoryCommandResults()), "GET", "/ready")
    assert "coordination" not in reply.json()


async def test_client_leaving_a_non_streamed_request_cancels_and_stores_incomplete() -> None:
    gate, leave = asyncio.Event(), asyncio.Event()
    store = MemoryStore()
    backend = ScriptedBackend([TextDelta("partial")], gate=gate)
    gateway = Gateway(
        store, Router([BackendEntry(backend, {}, catch_all=True)]), Loop(store), RunRegistry()
    )
    app = build_http_app(ResponsesRoutes(gateway, 4096), ServiceRoutes(gateway))
    request = asyncio.create_task(
        call(app, "POST", "/v1/responses", b'{"model": "m", "input": "x"}', leave=leave)
    )
    await backend.started.wait()
    leave.set()
    await backend.closed.wait()  # the upstream call was cancelled, not finished (gate unset)
    await request
    [record] = store.records.values()
    assert record.status == "incomplete"
    assert record.body["incomplete_reason"] == "client_disconnected"
    assert not gate.is_set()


async def test_json_route_requires_a_json_content_type() -> None:
    app = build()
    body = b'{"model": "m", "input": "hi"}'
    for content_type in ["text/plain", "application/x-www-form-urlencoded", None, "json"]:
        reply = await call(app, "POST", "/v1/responses", body, content_type=content_type)
        assert reply.status == 415, content_type
        error = reply.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["code"] == "unsupported_media_type"
    for content_type in ["application/json; charset=utf-8", "Application/JSON"]:
        reply = await call(app, "POST", "/v1/responses", body, content_type=content_type)
        assert reply.status == 200, content_type


async def test_405_names_the_allowed_methods() -> None:
    app = build()
    for method, path, allowed in [
        ("GET", "/v1/responses", {"POST"}),
        ("PATCH", "/v1/responses", {"POST"}),
        ("PUT", "/v1/responses/resp_1", {"GET", "HEAD", "DELETE"}),
        ("POST", "/v1/responses/resp_1/input_items", {"GET", "HEAD"}),
        ("GET", "/v1/responses/resp_1/cancel", {"POST"}),
        ("POST", "/health", {"GET", "HEAD"}),
    ]:
        reply = await call(app, method, path)
        assert reply.status == 405, (method, path)
        assert set(reply.headers["allow"].split(", ")) == allowed, (method, path)
        assert reply.json()["error"]["code"] == "method_not_allowed"


async def test_reserved_route_names_are_never_read_as_response_ids() -> None:
    app = build()
    unknown = (await call(app, "GET", "/v1/nothing")).json()["error"]
    for path in [
        "/v1/responses/compact/input_items",
        "/v1/responses/input_tokens/input_items",
    ]:
        for method in ["GET", "POST", "DELETE", "PUT", "TRACE"]:
            reply = await call(app, method, path, b"{}")
            assert reply.status == 404, (method, path)
            error = reply.json()["error"]
            assert error == {**unknown, "message": f"Unknown route: {method} {path}."}


async def test_a_trailing_slash_is_an_unknown_route_not_a_redirect() -> None:
    """As hosted (``Invalid URL (POST /v1/chat/completions/)``, a 404): a 307 would have
    a client send its body again, to another path than the one it named."""
    app = build()
    unknown = (await call(app, "GET", "/v1/nothing")).json()["error"]
    for method, path in [
        ("POST", "/v1/responses/"),
        ("GET", "/v1/responses/resp_1/"),
        ("POST", "/v1/responses/resp_1/cancel/"),
        ("POST", "/v1/responses/compact/"),
        ("GET", "/health/"),
    ]:
        reply = await call(app, method, path, b'{"model": "m", "input": "hi"}')
        assert (reply.status, "location" in reply.headers) == (404, False), (method, path)
        error = reply.json()["error"]
        assert error == {**unknown, "message": f"Unknown route: {method} {path}."}


async def test_a_base_url_without_v1_or_with_it_twice_is_told_in_the_404() -> None:
    """The first-hour mistakes: the OpenAI SDK given the gateway's root (it adds no
    ``/v1``), the anthropic SDK or Claude Code given ``.../v1`` (they add their own)."""
    app = build()
    for method, path in [
        ("POST", "/responses"),
        ("POST", "/chat/completions"),
        ("GET", "/models"),
        ("POST", "/conversations"),
        ("GET", "/responses/resp_1"),
    ]:
        reply = await call(app, method, path, b"{}")
        assert reply.status == 404, path
        assert reply.json()["error"]["message"] == (
            f"Unknown route: {method} {path}. Did you mean /v1{path}? A client that adds "
            "no /v1 itself (the openai SDK) takes the gateway's URL with /v1 as its base "
            "URL: http://HOST:PORT/v1."
        )
    for method, path in [("POST", "/v1/v1/messages"), ("POST", "/v1/v1/responses")]:
        reply = await call(app, method, path, b"{}")
        assert reply.status == 404, path
        error = reply.json()["error"]
        assert error["message"] == (
            f"Unknown route: {method} {path}. The path holds /v1 twice: a client that adds "
            "/v1 itself (the anthropic SDK, Claude Code) takes the gateway's root as its "
            "base URL: http://HOST:PORT."
        )
    for path in ["/v1/nothing", "/health/x", "/nothing"]:  # nothing to tell
        reply = await call(app, "GET", path)
        assert reply.json()["error"]["message"] == f"Unknown route: GET {path}.", path


async def test_the_mcp_surface_is_served_with_a_trailing_slash_too() -> None:
    """MCP clients are often configured with ``/mcp/`` (once redirected to ``/mcp``)."""
    seen: list[str] = []

    class Mcp:  # an ASGI app, as the mounted surface is
        async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
            seen.append(scope["path"])
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})

    store = MemoryStore()
    router = Router([BackendEntry(ScriptedBackend([]), {}, catch_all=True)])
    gateway = Gateway(store, router, Loop(store), RunRegistry())
    app = build_http_app(ResponsesRoutes(gateway, 4096), ServiceRoutes(gateway), mcp=Mcp())
    for path in ["/mcp", "/mcp/"]:
        reply = await call(app, "POST", path, b"{}")
        assert (reply.status, reply.body) == (200, b"ok"), path
    assert seen == ["/mcp", "/mcp/"]
    assert (await call(app, "POST", "/mcp/x", b"{}")).status == 404


async def test_compact_and_input_tokens_take_post_only() -> None:
    app = build()
    for path in ["/v1/responses/compact", "/v1/responses/input_tokens"]:
        for method in ["GET", "DELETE", "PUT", "TRACE"]:
            reply = await call(app, method, path, b"{}")
            assert reply.status == 405, (method, path)
            assert reply.headers["allow"] == "POST"
            error = reply.json()["error"]
            assert error["code"] == "method_not_allowed"
            assert error["message"] == f"Method {method} is not allowed on {path}."


async def test_an_upgrade_of_a_path_with_no_websocket_route_is_an_unknown_route() -> None:
    """A WebSocket upgrade elsewhere than ``/v1/responses`` (a base URL without ``/v1``,
    a typo) is answered as any unknown route: a 404 in the OpenAI shape, not Starlette's
    bare 403, which reads as a refused credential; a server that cannot answer an
    upgrade over HTTP has it closed, as before."""
    app = build()
    for path in ["/responses", "/v1/chat/completions", "/v1/responses/"]:
        sent = await upgrade(app, path, {"websocket.http.response": {}})
        start, body = sent[0], b"".join(m.get("body", b"") for m in sent[1:])
        assert (start["type"], start["status"]) == ("websocket.http.response.start", 404)
        error = orjson.loads(body)["error"]
        assert error["code"] == "not_found"
        assert error["message"].startswith(f"Unknown route: GET {path}.")  # a hint may follow
    sent = await upgrade(app, "/responses")
    assert [m["type"] for m in sent] == ["websocket.close"]


async def upgrade(
    app: Starlette, path: str, extensions: dict[str, object] | None = None
) -> list[dict[str, object]]:
    """A WebSocket upgrade of ``path``: what the app sent back (``extensions``: the
    server's, such as the HTTP answer to an upgrade it refuses; None: a server that sets
    no ``extensions`` key, which ASGI allows)."""
    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        return {"type": "websocket.connect"}

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    scope: dict[str, object] = {
        "type": "websocket",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1")],
        "scheme": "ws",
        "server": ("127.0.0.1", 80),
        "client": ("127.0.0.1", 1),
        "subprotocols": [],
        "state": {},
    }
    if extensions is not None:
        scope["extensions"] = extensions
    await app(scope, receive, send)
    return sent


async def test_an_upgrade_of_v1_responses_without_websocket_mode_is_refused_with_426() -> None:
    """An app composed without WebSocket mode tells a client that tries it first (Codex)
    to use HTTP: a 426 in the OpenAI shape, or, where the server cannot answer an upgrade
    over HTTP, a close with 1008 and the same words."""
    app = build()
    words = "WebSocket mode is not served here; send POST /v1/responses over HTTP."
    sent = await upgrade(app, "/v1/responses", {"websocket.http.response": {}})
    start, body = sent[0], b"".join(m.get("body", b"") for m in sent[1:])
    assert (start["type"], start["status"]) == ("websocket.http.response.start", 426)
    error = orjson.loads(body)["error"]
    assert (error["code"], error["message"]) == ("websocket_not_supported", words)
    [closed] = await upgrade(app, "/v1/responses")
    assert closed == {"type": "websocket.close", "code": 1008, "reason": words}


async def test_delete_answers_the_deleted_object() -> None:
    app = build()
    created = (await call(app, "POST", "/v1/responses", b'{"model": "m", "input": "hi"}')).json()
    deleted = await call(app, "DELETE", f"/v1/responses/{created['id']}")
    assert deleted.status == 200
    assert deleted.json() == {"id": created["id"], "object": "response.deleted", "deleted": True}
    assert (await call(app, "GET", f"/v1/responses/{created['id']}")).status == 404


@pytest.mark.parametrize("path", ["", "/input_items"], ids=["retrieve", "input_items"])
async def test_a_reads_include_is_taken_in_either_spelling_and_checked(path: str) -> None:
    """``include[]=`` (the SDKs') and ``include=``, in that order, each value checked as
    hosted checks it: an unknown one is refused naming its index."""
    app = build()
    created = (await call(app, "POST", "/v1/responses", b'{"model": "m", "input": "hi"}')).json()
    read = f"/v1/responses/{created['id']}{path}"
    known = "message.output_text.logprobs"
    for query, param in [
        ("include[]=bogus", "include[0]"),
        ("include=bogus", "include[0]"),
        (f"include[]={known}&include=bogus", "include[1]"),
        (f"include={known}&include[]=bogus", "include[0]"),
    ]:
        reply = await call(app, "GET", read, query=query)
        assert reply.status == 400, query
        assert reply.json()["error"]["param"] == param, query
    assert (await call(app, "GET", read, query=f"include[]={known}&include={known}")).status == 200
