"""The authentication middleware in process: every route needs a credential once auth
is configured, refusals come in each frontend's shape, probes stay open, the admin and
tenant credentials each reach only their routes, and a WebSocket upgrade is denied."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.types import Message

from stateway.core.gateway import Gateway
from stateway.core.generations import ConfigStatus
from stateway.core.inference import Finish, TextDelta
from stateway.core.loop import Loop
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.identity.key_cache import KeyCache
from stateway.identity.oidc import OidcVerifier
from stateway.surfaces.auth.authenticator import Authenticator
from stateway.surfaces.http.admin import AdminRoutes
from stateway.surfaces.http.app import build_http_app
from stateway.surfaces.http.authentication import Authentication
from stateway.surfaces.http.chat import ChatRoutes
from stateway.surfaces.http.conversations import ConversationsRoutes
from stateway.surfaces.http.messages import MessagesRoutes
from stateway.surfaces.http.responses import ResponsesRoutes
from stateway.surfaces.http.service import ServiceRoutes
from stateway.surfaces.mcp.server import McpSurface
from tests.core.conversation_fakes import MemoryConversations, TurnStore
from tests.core.fakes import ScriptedBackend
from tests.identity.test_key_cache import Clock, Store
from tests.support.oidc_issuer import AUDIENCE, TENANT_CLAIM, OidcIssuer
from tests.surfaces.auth.test_authenticator import ADMIN, keyed
from tests.surfaces.http.asgi import call

BODY = b'{"model": "m", "input": "hi"}'
MESSAGES_BODY = b'{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}'


class Reloads:
    async def reload(self) -> ConfigStatus:
        return self.status()

    def status(self) -> ConfigStatus:
        return ConfigStatus(1, 0.0, None, (), ())


def build(authenticator: Authenticator) -> Starlette:
    conversations = MemoryConversations()
    store = TurnStore(conversations)
    backend = ScriptedBackend([TextDelta("ok"), Finish("stop")])
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    gateway = Gateway(store, router, Loop(store), RunRegistry(), conversations=conversations)
    gateway.reloads = Reloads()
    return build_http_app(
        ResponsesRoutes(gateway, 4096),
        ServiceRoutes(gateway),
        conversations=ConversationsRoutes(gateway, 4096),
        messages=MessagesRoutes(gateway, 4096),
        chat=ChatRoutes(gateway, 4096),
        admin=AdminRoutes(gateway, reload_endpoint=True),
        mcp=McpSurface(gateway),
        authenticator=authenticator,
    )


@pytest.fixture
async def keys() -> tuple[Starlette, str]:
    store = Store()
    key, _ = await keyed(store, tenant="acme")
    authenticator = Authenticator(keys=KeyCache(store, 2.0, clock=Clock()), admin_key=ADMIN)
    return build(authenticator), key


def bearer(credential: str) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", f"Bearer {credential}".encode())]


async def test_a_request_without_a_credential_is_a_401_in_the_openai_shape(
    keys: tuple[Starlette, str],
) -> None:
    app, _ = keys
    reply = await call(app, "POST", "/v1/responses", BODY)

    assert reply.status == 401
    assert reply.headers["www-authenticate"] == "Bearer"
    assert reply.json() == {
        "error": {
            "message": "Missing credentials: send 'Authorization: Bearer <API key or token>' "
            "or 'x-api-key: <API key>'.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }


async def test_messages_refusals_have_anthropics_shape_and_a_request_id(
    keys: tuple[Starlette, str],
) -> None:
    app, _ = keys
    reply = await call(app, "POST", "/v1/messages", MESSAGES_BODY, headers=bearer("sk-wrong"))

    assert reply.status == 401
    assert reply.json() == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "Incorrect API key provided."},
        "request_id": reply.headers["request-id"],
    }
    assert reply.headers["request-id"].startswith("req_")
    listing = await call(app, "GET", "/v1/models", headers=[(b"anthropic-version", b"2023-06-01")])
    assert listing.json()["error"]["type"] == "authentication_error"


async def test_a_key_is_accepted_on_every_route_either_way(keys: tuple[Starlette, str]) -> None:
    app, key = keys
    for headers in (bearer(key), [(b"x-api-key", key.encode())]):
        created = await call(app, "POST", "/v1/responses", BODY, headers=headers)
        assert created.status == 200
        response_id = created.json()["id"]
        fetched = await call(app, "GET", f"/v1/responses/{response_id}", headers=headers)
        assert fetched.status == 200
        models = await call(app, "GET", "/v1/models", headers=headers)
        assert models.status == 200
        messages = await call(app, "POST", "/v1/messages", MESSAGES_BODY, headers=headers)
        assert messages.status == 200
        conversation = await call(app, "POST", "/v1/conversations", b"{}", headers=headers)
        assert conversation.status == 200


async def test_health_and_readiness_need_no_credential(keys: tuple[Starlette, str]) -> None:
    app, _ = keys
    assert (await call(app, "GET", "/health", content_type=None)).status == 200
    assert (await call(app, "GET", "/ready", content_type=None)).status == 200


async def test_an_unknown_route_without_a_credential_is_a_401_not_a_404(
    keys: tuple[Starlette, str],
) -> None:
    app, _ = keys
    assert (await call(app, "GET", "/v1/nothing", content_type=None)).status == 401


async def test_the_admin_routes_take_the_admin_credential_only(
    keys: tuple[Starlette, str],
) -> None:
    app, key = keys
    status = "/admin/config/status"

    assert (await call(app, "GET", status, headers=bearer(ADMIN))).status == 200
    admin_as_x = await call(app, "GET", status, headers=[(b"x-api-key", ADMIN.encode())])
    assert admin_as_x.status == 200
    tenant = await call(app, "GET", status, headers=bearer(key))
    assert tenant.status == 403
    assert tenant.json()["error"]["code"] == "permission_denied"
    assert (await call(app, "GET", status, headers=bearer("sk-wrong"))).status == 401
    as_tenant = await call(app, "POST", "/v1/responses", BODY, headers=bearer(ADMIN))
    assert as_tenant.status == 403


BAD_BODIES = pytest.mark.parametrize(
    ("raw", "content_type"),
    [(b"{", "application/json"), (b'{"model": 1}', "application/json"), (b"{}", "text/plain")],
)


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
@BAD_BODIES
async def test_the_admin_credential_on_messages_is_refused_before_its_body_is_judged(
    keys: tuple[Starlette, str], path: str, raw: bytes, content_type: str
) -> None:
    app, _ = keys
    headers = [(b"x-api-key", ADMIN.encode()), (b"anthropic-version", b"2023-06-01")]

    reply = await call(app, "POST", path, raw, headers=headers, content_type=content_type)

    assert reply.status == 403, reply.body
    assert reply.json()["error"]["type"] == "permission_error"
    assert reply.json()["request_id"] == reply.headers["request-id"]


@pytest.mark.parametrize(
    "path",
    [
        "/v1/responses",
        "/v1/responses/compact",
        "/v1/responses/input_tokens",
        "/v1/chat/completions",
        "/v1/conversations",
    ],
)
@BAD_BODIES
async def test_the_admin_credential_is_refused_before_its_body_is_judged(
    keys: tuple[Starlette, str], path: str, raw: bytes, content_type: str
) -> None:
    app, _ = keys

    reply = await call(app, "POST", path, raw, headers=bearer(ADMIN), content_type=content_type)

    assert reply.status == 403, reply.body
    assert reply.json()["error"]["code"] == "permission_denied"


async def test_the_admin_credential_opens_no_mcp_session(keys: tuple[Starlette, str]) -> None:
    app, _ = keys
    initialize = b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}'

    reply = await call(app, "POST", "/mcp", initialize, headers=bearer(ADMIN))

    assert reply.status == 403
    assert reply.json()["error"]["code"] == "permission_denied"
    assert (await call(app, "POST", "/mcp", initialize)).status == 401


async def test_without_auth_the_admin_routes_still_need_the_admin_credential() -> None:
    app = build(Authenticator(admin_key=ADMIN))
    status = "/admin/config/status"

    assert (await call(app, "GET", status)).status == 401
    assert (await call(app, "GET", status, headers=bearer("sk-test"))).status == 401
    assert (await call(app, "GET", status, headers=bearer(ADMIN))).status == 200
    anyone = await call(app, "POST", "/v1/responses", BODY, headers=bearer("sk-test"))
    assert anyone.status == 200


@pytest.fixture
def down_issuer() -> Iterator[OidcIssuer]:
    with OidcIssuer() as issuer:
        issuer.down = True
        yield issuer


async def test_an_unreachable_identity_provider_is_a_503_in_each_shape(
    down_issuer: OidcIssuer,
) -> None:
    from stateway.identity.oidc_settings import OidcSettings

    settings = OidcSettings(down_issuer.url, AUDIENCE, TENANT_CLAIM)
    app = build(Authenticator(oidc=OidcVerifier(settings)))
    token = bearer(down_issuer.token())

    openai = await call(app, "POST", "/v1/responses", BODY, headers=token)
    assert openai.status == 503
    assert openai.json()["error"]["code"] == "identity_provider_unavailable"
    anthropic = await call(app, "POST", "/v1/messages", MESSAGES_BODY, headers=token)
    assert anthropic.status == 503
    assert anthropic.json()["error"]["type"] == "api_error"  # not an overload (no 529)
    # the verifier asks the provider again after its cooldown (1 s), not before
    assert (openai.headers["retry-after"], anthropic.headers["retry-after"]) == ("1", "1")
    assert token[0][1].decode().split()[1] not in anthropic.body.decode()


async def test_a_key_that_cannot_be_checked_is_a_503_logged_once_without_the_key(
    keys: tuple[Starlette, str], caplog: pytest.LogCaptureFixture
) -> None:
    """The database holding the keys is unreachable: the 503 is logged as a route's 5xx
    is, once per request, and the key is in no log line."""
    _, key = keys
    store = Store()
    store.failing = True
    app = build(Authenticator(keys=KeyCache(store, 2.0, clock=Clock())))

    with caplog.at_level(logging.INFO):
        reply = await call(app, "POST", "/v1/responses", BODY, headers=bearer(key))
        denied = await call(app, "GET", "/v1/models", headers=[(b"x-api-key", key.encode())])

    assert (reply.status, denied.status) == (503, 503)
    assert reply.json()["error"]["code"] == "storage_unavailable"
    logged = [r for r in caplog.records if r.name == "stateway.surfaces.http.errors"]
    assert [(r.levelno, r.getMessage()) for r in logged] == [
        (logging.WARNING, "POST /v1/responses -> 503 Storage failed while looking up an API key."),
        (logging.WARNING, "GET /v1/models -> 503 Storage failed while looking up an API key."),
    ]
    assert key not in caplog.text
    assert key[8:20] not in caplog.text


async def test_a_refused_credential_is_not_logged(
    keys: tuple[Starlette, str], caplog: pytest.LogCaptureFixture
) -> None:
    """A 401 is the client's doing: only the 5xx of the login check are logged, so a
    client retrying a bad key does not fill the log."""
    app, _ = keys
    with caplog.at_level(logging.INFO):
        wrong = await call(app, "POST", "/v1/responses", BODY, headers=bearer("sk-wrong"))
        missing = await call(app, "POST", "/v1/messages", MESSAGES_BODY)

    assert (wrong.status, missing.status) == (401, 401)
    assert [r for r in caplog.records if r.name == "stateway.surfaces.http.errors"] == []


async def upgrade(
    app: Starlette, headers: list[tuple[bytes, bytes]], extensions: dict[str, Any] | None = None
) -> list[Message]:
    """A WebSocket upgrade of ``/v1/responses`` with ``headers``: what the app sent back
    (``extensions``: the server's, such as the HTTP answer to an upgrade it refuses)."""
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "websocket.connect"}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {
        "type": "websocket",
        "path": "/v1/responses",
        "raw_path": b"/v1/responses",
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1"), *headers],
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


async def test_a_websocket_upgrade_without_a_credential_is_denied_with_a_401(
    keys: tuple[Starlette, str],
) -> None:
    app, _ = keys
    sent = await upgrade(app, [], {"websocket.http.response": {}})

    assert sent[0]["type"] == "websocket.http.response.start"
    assert sent[0]["status"] == 401


async def test_a_websocket_upgrade_whose_key_cannot_be_checked_is_logged_once(
    keys: tuple[Starlette, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Closed (1008) where the server cannot answer an upgrade over HTTP: logged all the
    same, as a GET."""
    _, key = keys
    store = Store()
    store.failing = True
    app = build(Authenticator(keys=KeyCache(store, 2.0, clock=Clock())))
    with caplog.at_level(logging.INFO):
        sent = await upgrade(app, bearer(key))

    assert sent == [
        {
            "type": "websocket.close",
            "code": 1008,
            "reason": "Storage failed while looking up an API key.",
        }
    ]
    logged = [r for r in caplog.records if r.name == "stateway.surfaces.http.errors"]
    assert [r.getMessage() for r in logged] == [
        "GET /v1/responses -> 503 Storage failed while looking up an API key."
    ]
    assert key not in caplog.text


async def test_a_lifespan_passes_untouched_and_unidentified() -> None:
    passed: list[tuple[Any, Any, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        passed.append((scope, receive, send))

    async def receive() -> Message:
        return {"type": "lifespan.startup"}

    async def send(message: Message) -> None:
        pass

    scope: dict[str, Any] = {"type": "lifespan"}
    authenticator = Authenticator(keys=KeyCache(Store(), 2.0, clock=Clock()))
    await Authentication(app, authenticator)(scope, receive, send)
    assert passed == [({"type": "lifespan"}, receive, send)]
