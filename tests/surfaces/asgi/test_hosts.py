"""The Host check: DNS-rebinding requests are refused before any route runs."""

from __future__ import annotations

import pytest

from stateway.core.gateway import Gateway
from stateway.core.inference import Finish, TextDelta
from stateway.core.loop import Loop
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.server_config import ServerConfig
from stateway.surfaces.asgi.hosts import host_name
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
