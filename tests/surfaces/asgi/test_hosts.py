"""The Host check: DNS-rebinding requests are refused before any route runs."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from starlette.types import Receive, Scope, Send

from stateway.core.gateway import Gateway
from stateway.core.inference import Finish, TextDelta
from stateway.core.loop import Loop
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.server_config import ServerConfig
from stateway.surfaces.asgi.hosts import HostGuard, host_name
from stateway.surfaces.http.app import build_http_app
from stateway.surfaces.http.responses import ResponsesRoutes
from stateway.surfaces.http.service import ServiceRoutes
from tests.core.fakes import MemoryStore, ScriptedBackend
from tests.surfaces.http.asgi import call

BODY = b'{"model": "m", "input": "hi"}'


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("127.0.0.1:8080", "127.0.0.1"),
        ("LocalHost:80", "localhost"),
        ("localhost", "localhost"),
        ("[::1]:8080", "[::1]"),
        ("[::1]", "[::1]"),
        ("Example.COM", "example.com"),
        ("", ""),
        ("[::1", "[::1"),
    ],
)
def test_host_name_drops_the_port_and_case(header: str, name: str) -> None:
    assert host_name(header) == name


async def test_only_allowed_hosts_reach_the_routes() -> None:
    store = MemoryStore()
    backend = ScriptedBackend([TextDelta("ok"), Finish("stop")])
    gateway = Gateway(
        store, Router([BackendEntry(backend, {}, catch_all=True)]), Loop(store), RunRegistry()
    )
    allowed = ServerConfig().effective_allowed_hosts
    assert allowed is not None
    app = build_http_app(
        ResponsesRoutes(gateway, 4096), ServiceRoutes(gateway), allowed_hosts=allowed
    )
    for host in [b"127.0.0.1:8080", b"localhost:8080", b"LOCALHOST", b"[::1]:8080"]:
        reply = await call(app, "POST", "/v1/responses", BODY, headers=[(b"host", host)])
        assert reply.status == 200, host
    for hosts in [[(b"host", b"evil.example:8080")], [(b"host", b"127.0.0.1.evil.example")], []]:
        reply = await call(app, "POST", "/v1/responses", BODY, headers=hosts)
        assert reply.status == 421, hosts
        error = reply.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["code"] == "host_not_allowed"
        health = await call(app, "GET", "/health", headers=hosts)
        assert health.status == 421
    assert len(backend.requests) == 4


async def _ok(scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


WILDCARD_GUARD = ServerConfig(
    allowed_hosts=["*.Example.com:8443", "api.internal", "::1", "localhost."]
).effective_allowed_hosts


@pytest.mark.parametrize(
    ("header", "served"),
    [
        (b"a.example.com", True),
        (b"A.Example.COM:8443", True),
        (b"a.b.example.com:80", True),
        (b"a.example.com.", True),  # a fully qualified name, as Django takes it
        (b"a.example.com.:8080", True),
        (b"example.com", False),  # the wildcard names subdomains only, as Starlette's
        (b".example.com", False),
        (b"evilexample.com", False),
        (b"a.example.com.evil.net", False),
        (b"a b.example.com", False),
        (b"a/.example.com", False),
        (b"a..example.com", False),
        (b"api.internal", True),
        (b"API.Internal.:80", True),
        (b"x.api.internal", False),  # no wildcard: that name only
        (b"[::1]:8080", True),
        (b"[::1]", True),
        (b"[::2]", False),
        (b"localhost", True),
        (b"localhost.", True),
        (b"", False),
        (b".", False),
    ],
)
async def test_a_subdomain_wildcard_serves_any_subdomain_in_any_case_port_or_final_dot(
    header: bytes, served: bool
) -> None:
    assert WILDCARD_GUARD is not None
    guard = HostGuard(_ok, WILDCARD_GUARD)

    reply = await call(guard, "GET", "/health", headers=[(b"host", header)] if header else [])

    assert reply.status == (204 if served else 421), header
    assert guard.passes({"type": "http", "headers": [(b"host", header)]}) is served


@pytest.mark.parametrize(
    "entry", ["a.*.example.com", "*example.com", "**.example.com", "*.", "*.*"]
)
def test_a_wildcard_anywhere_but_a_whole_first_label_is_refused(entry: str) -> None:
    with pytest.raises(ValidationError, match="allowed_hosts"):
        ServerConfig(allowed_hosts=[entry])


def test_a_lone_star_still_serves_any_host() -> None:
    assert ServerConfig(allowed_hosts=["gw.internal", "*"]).effective_allowed_hosts is None
