"""The admin routes in process: served only with a credential, the reload route only
when enabled, a bearer key checked, the status and a rejected reload in their shapes."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette

from stateway.core.errors import ConfigRejected
from stateway.core.gateway import Gateway
from stateway.core.generations import ConfigStatus
from stateway.core.loop import Loop
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.surfaces.auth.authenticator import Authenticator
from stateway.surfaces.http.admin import AdminRoutes
from stateway.surfaces.http.app import build_http_app
from stateway.surfaces.http.responses import ResponsesRoutes
from stateway.surfaces.http.service import ServiceRoutes
from tests.core.fakes import MemoryStore, ScriptedBackend
from tests.surfaces.http.asgi import call
from tests.surfaces.http.test_usage_and_metrics import with_keys

KEY = "admin-secret"
BEARER = [(b"authorization", f"Bearer {KEY}".encode())]


class Reloads:
    def __init__(self) -> None:
        self.generation = 1
        self.error: str | None = None

    async def reload(self) -> ConfigStatus:
        if self.error is not None:
            raise ConfigRejected(f"The configuration was not reloaded: {self.error}")
        self.generation += 1
        return self.status()

    def status(self) -> ConfigStatus:
        return ConfigStatus(self.generation, 1700000000.5, self.error, ("server.port",), (1,))


def build(
    *, admin: bool = True, reload_endpoint: bool = True, authenticator: Authenticator | None = None
) -> tuple[Starlette, Reloads]:
    store = MemoryStore()
    router = Router([BackendEntry(ScriptedBackend([]), {}, catch_all=True)])
    gateway = Gateway(store, router, Loop(store), RunRegistry())
    reloads = Reloads()
    gateway.reloads = reloads
    routes = AdminRoutes(gateway, reload_endpoint) if admin else None
    app = build_http_app(
        ResponsesRoutes(gateway, 4096),
        ServiceRoutes(gateway),
        admin=routes,
        authenticator=authenticator or Authenticator(admin_key=KEY),
    )
    return app, reloads


async def test_the_status_with_the_key() -> None:
    app, _ = build()
    reply = await call(app, "GET", "/admin/config/status", headers=BEARER, content_type=None)
    assert reply.status == 200
    assert reply.json() == {
        "generation": 1,
        "loaded_at": 1700000000.5,
        "last_error": None,
        "restart_required": ["server.port"],
        "retiring": [1],
    }


async def test_a_reload_with_the_key_answers_the_new_status() -> None:
    app, _ = build()
    reply = await call(app, "POST", "/admin/config/reload", headers=BEARER, content_type=None)
    assert reply.status == 200
    assert reply.json()["generation"] == 2


async def test_a_rejected_reload_is_a_400_naming_why() -> None:
    app, reloads = build()
    reloads.error = "route 'a': unknown backend 'gone'"
    reply = await call(app, "POST", "/admin/config/reload", headers=BEARER, content_type=None)
    assert reply.status == 400
    assert reply.json()["error"]["code"] == "config_invalid"
    assert "unknown backend 'gone'" in reply.json()["error"]["message"]


@pytest.mark.parametrize(
    "headers",
    [
        [],
        [(b"authorization", b"Bearer wrong")],
        [(b"authorization", b"Basic " + KEY.encode())],
        [(b"authorization", KEY.encode())],
    ],
)
@pytest.mark.parametrize(
    ("method", "path"), [("GET", "/admin/config/status"), ("POST", "/admin/config/reload")]
)
async def test_without_the_key_both_routes_are_401(
    headers: list[tuple[bytes, bytes]], method: str, path: str
) -> None:
    app, reloads = build()
    reply = await call(app, method, path, headers=headers, content_type=None)
    assert reply.status == 401
    assert reply.headers["www-authenticate"] == "Bearer"
    assert reply.json()["error"]["code"] == "invalid_api_key"
    assert reply.json()["error"]["message"] == (
        "The admin routes need 'Authorization: Bearer <admin key>'."
    )
    assert reloads.generation == 1  # nothing was reloaded


@pytest.mark.parametrize(
    ("method", "path"), [("GET", "/admin/config/status"), ("POST", "/admin/config/reload")]
)
async def test_a_tenants_key_is_a_403_naming_the_admin_credential(method: str, path: str) -> None:
    authenticator, key = await with_keys()
    app, reloads = build(authenticator=authenticator)
    bearer = [(b"authorization", f"Bearer {key}".encode())]
    reply = await call(app, method, path, headers=bearer, content_type=None)
    assert reply.status == 403
    assert reply.json()["error"]["message"] == (
        "This route needs the admin credential; a tenant's does not reach it."
    )
    assert reloads.generation == 1


async def test_the_reload_route_is_not_served_unless_enabled() -> None:
    app, reloads = build(reload_endpoint=False)
    reply = await call(app, "POST", "/admin/config/reload", headers=BEARER, content_type=None)
    assert reply.status == 404
    assert reloads.generation == 1
    status = await call(app, "GET", "/admin/config/status", headers=BEARER, content_type=None)
    assert status.status == 200


async def test_no_admin_route_is_served_without_a_credential() -> None:
    app, _ = build(admin=False)
    for method, path in (("GET", "/admin/config/status"), ("POST", "/admin/config/reload")):
        reply = await call(app, method, path, headers=BEARER, content_type=None)
        assert reply.status == 404
