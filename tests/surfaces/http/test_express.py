"""The routes served ahead of Starlette (:mod:`stateway.surfaces.http.express`: Chat
Completions, the Responses create and the Messages create) keep what every route has: the
Host check, authentication and the tenant it proves, the request's id and report, 405 for
another method, and errors in their protocol's shape (Anthropic's for Messages)."""

from __future__ import annotations

import re
import sys
from typing import Any

import pytest
from starlette.applications import Starlette

from stateway.core.commands import CreateResponse, ForwardChat
from stateway.core.gateway import Gateway
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.identity.key_cache import KeyCache
from stateway.surfaces.auth.authenticator import Authenticator
from stateway.surfaces.http.app import build_http_app
from stateway.surfaces.http.chat import ChatRoutes
from stateway.surfaces.http.messages import MessagesRoutes
from stateway.surfaces.http.responses import ResponsesRoutes
from stateway.surfaces.http.service import ServiceRoutes
from tests.core.fakes import MemoryStore
from tests.identity.test_key_cache import Clock, Store
from tests.surfaces.auth.test_authenticator import ADMIN, keyed
from tests.surfaces.http.asgi import Reply, call
from tests.surfaces.http.test_chat import FakeRelay, ForwardingBackend, body
from tests.surfaces.http.test_observed import REQUEST_ID_SHAPE, Observer

PATH = "/v1/chat/completions"
RESPONSES = "/v1/responses"
MESSAGES = "/v1/messages"
MESSAGES_BODY = b'{"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}'
BODIES = {PATH: body(), RESPONSES: b'{"model": "m", "input": "hi"}', MESSAGES: MESSAGES_BODY}
both = pytest.mark.parametrize("path", [PATH, RESPONSES], ids=["chat", "responses"])
every = pytest.mark.parametrize(
    "path", [PATH, RESPONSES, MESSAGES], ids=["chat", "responses", "messages"]
)


_MUTANT_NAME = re.compile(r"xǁ[^ǁ.]+ǁ([^.]+?)__mutmut_(?:orig|\d+)")


def source_name(qualname: str) -> str:
    """A function's qualified name as its source spells it: mutmut renames each method it
    mutates (``Express.xǁExpressǁ__call____mutmut_orig``) and calls it from a trampoline,
    and these tests, which name the functions a request runs in, run under it too."""
    return _MUTANT_NAME.sub(r"\1", qualname)


class Recording(Gateway):
    """Remembers who each command was executed for."""

    principals: list[Principal]

    async def execute(self, principal: Principal, command: Any) -> Any:
        self.principals.append(principal)
        return await super().execute(principal, command)


class Framed(Recording):
    """Records, for each command, the functions its request runs in (outermost last)."""

    frames: list[list[str]]

    async def execute(self, principal: Principal, command: Any) -> Any:
        frame, names = sys._getframe(), []
        while frame is not None:
            names.append(source_name(frame.f_code.co_qualname))
            frame = frame.f_back  # type: ignore[assignment]
        self.frames.append(names)
        return await super().execute(principal, command)


class Exploding(Gateway):
    async def execute(self, principal: Principal, command: Any) -> Any:
        assert isinstance(command, ForwardChat | CreateResponse)
        raise RuntimeError("a bug")


def relay() -> FakeRelay:
    return FakeRelay(200, {"content-type": "application/json"}, [b'{"ok": true}'], None)


class Upgrades:
    """A WebSocket endpoint that accepts, then records the scope it was served with."""

    def __init__(self) -> None:
        self.scopes: list[Any] = []
        self.senders: list[str] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "websocket.accept"})
        self.scopes.append(scope)
        self.senders.append(source_name(send.__qualname__))
        await receive()


def build(
    gateway_class: type[Gateway] = Recording,
    *,
    authenticator: Authenticator | None = None,
    hosts: frozenset[str] | None = None,
    websocket: Upgrades | None = None,
    cors_origins: frozenset[str] = frozenset(),
) -> tuple[Starlette, Gateway, Observer]:
    store = MemoryStore()
    router = Router([BackendEntry(ForwardingBackend(relay()), {}, catch_all=True)])
    gateway = gateway_class(store, router, Loop(store), RunRegistry())
    gateway.principals = []  # type: ignore[attr-defined]
    observer = Observer()
    app = build_http_app(
        ResponsesRoutes(gateway, 4096),
        ServiceRoutes(gateway),
        chat=ChatRoutes(gateway, 4096),
        messages=MessagesRoutes(gateway, 4096),
        observer=observer,
        authenticator=authenticator,
        allowed_hosts=hosts,
        websocket=websocket,
        cors_origins=cors_origins,
    )
    return app, gateway, observer


def assert_openai_error(reply: Reply, status: int, code: str) -> None:
    assert reply.status == status, reply.body
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code


async def test_a_relayed_answer_is_observed_under_its_route_with_a_request_id() -> None:
    app, _, observer = build()
    reply = await call(app, "POST", PATH, body())
    assert (reply.status, reply.body) == (200, b'{"ok": true}')
    assert REQUEST_ID_SHAPE.fullmatch(reply.headers["x-request-id"])
    assert observer.ended == [(PATH, 200)]


async def test_a_created_response_is_observed_under_its_route_with_a_request_id() -> None:
    app, _, observer = build()
    reply = await call(app, "POST", RESPONSES, BODIES[RESPONSES])
    assert reply.status == 200
    assert reply.json()["status"] == "completed"
    assert REQUEST_ID_SHAPE.fullmatch(reply.headers["x-request-id"])
    assert observer.ended == [(RESPONSES, 200)]


@every
async def test_cors_wraps_the_express_routes_only_when_origins_are_listed(path: str) -> None:
    """With no origin listed a request runs in no CORS middleware (the plain path's cost
    unchanged, no header added); with one, the express route answers inside it."""
    page = [(b"origin", b"http://localhost:5173")]
    app, gateway, _ = build(Framed)
    gateway.frames = []  # type: ignore[attr-defined]
    plain = await call(app, "POST", path, BODIES[path], headers=page)
    assert plain.status == 200
    assert not [name for name in plain.headers if name.startswith("access-control-")]
    [names] = gateway.frames  # type: ignore[attr-defined]
    assert not [name for name in names if name.startswith("CORSMiddleware")]

    app, gateway, _ = build(Framed, cors_origins=frozenset({"http://localhost:5173"}))
    gateway.frames = []  # type: ignore[attr-defined]
    crossed = await call(app, "POST", path, BODIES[path], headers=page)
    assert crossed.status == 200
    assert crossed.headers["access-control-allow-origin"] == "http://localhost:5173"
    [names] = gateway.frames  # type: ignore[attr-defined]
    assert "CORSMiddleware.simple_response" in names
    assert "Express.__call__" in names


@both
async def test_another_method_is_a_405_naming_post(path: str) -> None:
    app, _, observer = build()
    reply = await call(app, "PUT", path)
    assert_openai_error(reply, 405, "method_not_allowed")
    # GET lists stored chat completions on hosted: a route of its own (a 404 here)
    listed = {"GET", "HEAD"} if path == PATH else set()
    assert set(reply.headers["allow"].split(", ")) == {"POST", *listed}
    assert "x-request-id" in reply.headers
    assert observer.ended == [(path, 405)]


@every
async def test_a_host_not_served_is_refused_before_the_route(path: str) -> None:
    app, gateway, _ = build(hosts=frozenset({"localhost"}))
    reply = await call(app, "POST", path, BODIES[path], headers=[(b"host", b"evil.example")])
    assert_openai_error(reply, 421, "host_not_allowed")
    assert gateway.principals == []  # type: ignore[attr-defined]


@every
async def test_a_request_passing_at_once_runs_in_no_middleware_of_its_own(path: str) -> None:
    """A request whose Host is served and whose identity needs nothing read (no auth
    configured) goes from the express dispatch to its route: the Host check and the
    authentication run as calls, not as two more coroutines that every suspension of the
    request resumes. One whose credential must be looked up goes through them."""
    app, gateway, _ = build(Framed, hosts=frozenset({"localhost"}))
    gateway.frames = []  # type: ignore[attr-defined]
    reply = await call(app, "POST", path, BODIES[path], headers=[(b"host", b"localhost")])
    assert reply.status == 200
    [names] = gateway.frames  # type: ignore[attr-defined]
    assert "Express.__call__" in names
    assert "HostGuard.__call__" not in names
    assert "Authentication.__call__" not in names

    store = Store()
    key, _ = await keyed(store, tenant="acme")
    authenticator = Authenticator(keys=KeyCache(store, 2.0, clock=Clock()))
    app, gateway, _ = build(Framed, authenticator=authenticator, hosts=frozenset({"localhost"}))
    gateway.frames = []  # type: ignore[attr-defined]
    headers = [(b"host", b"localhost"), (b"authorization", f"Bearer {key}".encode())]
    assert (await call(app, "POST", path, BODIES[path], headers=headers)).status == 200
    [names] = gateway.frames  # type: ignore[attr-defined]
    assert "Authentication.__call__" in names
    assert [p.tenant_id for p in gateway.principals] == ["acme"]  # type: ignore[attr-defined]


@both
async def test_the_route_acts_for_the_tenant_of_the_key_and_refuses_no_key(path: str) -> None:
    store = Store()
    key, _ = await keyed(store, tenant="acme")
    authenticator = Authenticator(keys=KeyCache(store, 2.0, clock=Clock()), admin_key=ADMIN)
    app, gateway, _ = build(authenticator=authenticator)
    refused = await call(app, "POST", path, BODIES[path])
    assert refused.status == 401
    assert "x-request-id" in refused.headers
    bearer = [(b"authorization", f"Bearer {key}".encode())]
    reply = await call(app, "POST", path, BODIES[path], headers=bearer)
    assert reply.status == 200
    assert [p.tenant_id for p in gateway.principals] == ["acme"]  # type: ignore[attr-defined]
    admin = await call(
        app, "POST", path, BODIES[path], headers=[(b"authorization", f"Bearer {ADMIN}".encode())]
    )
    assert_openai_error(admin, 403, "permission_denied")


@pytest.mark.parametrize(
    ("raw", "content_type", "status", "code"),
    [
        (b"", "application/json", 400, "invalid_json"),
        (b"{", "application/json", 400, "invalid_json"),
        (b"x" * 5000, "application/json", 413, "request_too_large"),
        (b"{}", "text/plain", 415, "unsupported_media_type"),
    ],
)
@both
async def test_bad_bodies_are_refused_in_the_openai_shape(
    raw: bytes, content_type: str, status: int, code: str, path: str
) -> None:
    app, _, observer = build()
    reply = await call(app, "POST", path, raw, content_type=content_type)
    assert_openai_error(reply, status, code)
    assert observer.ended == [(path, status)]


@both
async def test_an_unexpected_error_is_a_generic_500_logged_with_its_traceback(
    caplog: pytest.LogCaptureFixture, path: str
) -> None:
    app, _, observer = build(Exploding)
    reply = await call(app, "POST", path, BODIES[path])
    assert_openai_error(reply, 500, "internal_error")
    assert "a bug" not in reply.body.decode()
    assert observer.ended == [(path, 500)]
    [record] = [r for r in caplog.records if r.name == "stateway.surfaces.http.errors"]
    assert record.exc_info is not None


@every
async def test_a_client_gone_before_its_body_arrived_gets_no_answer(path: str) -> None:
    app, gateway, observer = build()
    sent: list[Any] = []
    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "headers": [(b"content-type", b"application/json")],
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        sent.append(message)

    await app(scope, receive, send)
    assert sent == []
    assert gateway.principals == []  # type: ignore[attr-defined]
    assert observer.ended == [(path, 499)]


def assert_anthropic_error(reply: Reply, status: int, kind: str) -> None:
    assert reply.status == status, reply.body
    answer = reply.json()
    assert answer["type"] == "error"
    assert answer["error"]["type"] == kind
    assert reply.headers["request-id"] == reply.headers["x-request-id"]


async def test_a_message_is_observed_under_its_route_with_one_request_id() -> None:
    app, _, observer = build()
    reply = await call(app, "POST", MESSAGES, MESSAGES_BODY)
    assert reply.status == 200, reply.body
    assert reply.json()["type"] == "message"
    assert REQUEST_ID_SHAPE.fullmatch(reply.headers["x-request-id"])
    assert reply.headers["request-id"] == reply.headers["x-request-id"]
    assert observer.ended == [(MESSAGES, 200)]


async def test_messages_errors_before_the_answer_are_in_anthropics_shape() -> None:
    app, _, observer = build()
    bad = await call(app, "POST", MESSAGES, b"{")
    assert_anthropic_error(bad, 400, "invalid_request_error")
    large = await call(app, "POST", MESSAGES, b"x" * 5000)
    assert_anthropic_error(large, 413, "request_too_large")
    assert observer.ended == [(MESSAGES, 400), (MESSAGES, 413)]


async def test_a_messages_bug_is_a_generic_500_logged_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app, _, observer = build(Exploding)
    reply = await call(app, "POST", MESSAGES, MESSAGES_BODY)
    assert_anthropic_error(reply, 500, "api_error")
    assert "a bug" not in reply.body.decode()
    assert observer.ended == [(MESSAGES, 500)]
    [record] = [r for r in caplog.records if r.name == "stateway.surfaces.http.messages"]
    assert record.exc_info is not None


async def test_another_method_on_messages_is_a_405() -> None:
    app, _, observer = build()
    reply = await call(app, "GET", MESSAGES)
    assert reply.status == 405
    assert reply.headers["allow"] == "POST"
    assert observer.ended == [(MESSAGES, 405)]


async def upgrade(app: Starlette, headers: list[tuple[bytes, bytes]]) -> list[Any]:
    """Open and close a WebSocket on ``/v1/responses``; what the app sent."""
    sent: list[Any] = []
    inbox = [{"type": "websocket.connect"}, {"type": "websocket.disconnect", "code": 1000}]
    scope = {
        "type": "websocket",
        "path": RESPONSES,
        "raw_path": RESPONSES.encode(),
        "query_string": b"",
        "headers": [(b"host", b"localhost"), *headers],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
        "subprotocols": [],
        "extensions": {"websocket.http.response": {}},
    }

    async def receive() -> dict[str, Any]:
        return inbox.pop(0)

    async def send(message: Any) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


async def test_a_websocket_upgrade_is_authenticated_observed_and_served_ahead() -> None:
    store = Store()
    key, _ = await keyed(store, tenant="acme")
    authenticator = Authenticator(keys=KeyCache(store, 2.0, clock=Clock()), admin_key=ADMIN)
    upgrades = Upgrades()
    app, _, observer = build(authenticator=authenticator, websocket=upgrades)

    refused = await upgrade(app, [])
    assert refused[0]["type"] == "websocket.http.response.start"
    assert refused[0]["status"] == 401
    assert upgrades.scopes == []

    accepted = await upgrade(app, [(b"authorization", f"Bearer {key}".encode())])
    assert accepted[0]["type"] == "websocket.accept"
    [scope] = upgrades.scopes
    assert scope["route"].path == RESPONSES
    # each frame's send passes no Starlette exception wrapper, only the observer's
    assert upgrades.senders == ["ObservedApp.__call__.<locals>.observed"]
    assert observer.ended == [(RESPONSES, 401), (RESPONSES, 101)]
