"""The request-loop check: a request this process sent upstream, come back to it, is
refused before any route or credential check."""

from __future__ import annotations

import pytest

from stateway.core.gateway import Gateway
from stateway.core.hops import Hop
from stateway.core.inference import Finish, TextDelta
from stateway.core.loop import Loop
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.identity.key_cache import KeyCache
from stateway.surfaces.auth.authenticator import Authenticator
from stateway.surfaces.http.app import build_http_app
from stateway.surfaces.http.responses import ResponsesRoutes
from stateway.surfaces.http.service import ServiceRoutes
from tests.core.fakes import MemoryStore, ScriptedBackend
from tests.identity.test_key_cache import Clock, Store
from tests.surfaces.auth.test_authenticator import keyed
from tests.surfaces.http.asgi import call

BODY = b'{"model": "m", "input": "hi"}'


async def test_a_request_naming_this_process_in_its_via_is_refused_as_a_loop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryStore()
    backend = ScriptedBackend([TextDelta("ok"), Finish("stop")])
    gateway = Gateway(
        store, Router([BackendEntry(backend, {}, catch_all=True)]), Loop(store), RunRegistry()
    )
    hop = Hop()
    keys = Store()
    key, _ = await keyed(keys, tenant="acme")
    app = build_http_app(
        ResponsesRoutes(gateway, 4096),
        ServiceRoutes(gateway),
        hop=hop,
        # Keys required: a loop is told as one, not as a 401 the sending gateway would
        # read as its upstream credential refused.
        authenticator=Authenticator(keys=KeyCache(keys, 2.0, clock=Clock())),
    )
    for via in [hop.via, f"1.1 proxy, {hop.via}"]:
        header = [(b"via", via.encode())]
        for method, path, body in [("POST", "/v1/responses", BODY), ("GET", "/v1/models", b"")]:
            reply = await call(app, method, path, body, headers=header)
            assert reply.status == 508, (path, via)
            error = reply.json()["error"]
            assert set(error) == {"message", "type", "param", "code"}
            assert error["code"] == "loop_detected"
            assert "points at this gateway itself" in error["message"]
            assert reply.headers["x-should-retry"] == "false"
    assert backend.requests == []
    logged = [r.getMessage() for r in caplog.records if r.name == "stateway.surfaces.asgi.loops"]
    assert len(logged) == 4
    assert logged[0].startswith(
        "request loop: refused POST /v1/responses, which this gateway sent itself"
    )
    assert logged[1].startswith("request loop: refused GET /v1/models, which")

    bearer = (b"authorization", f"Bearer {key}".encode())
    for via in [Hop().via, "1.1 proxy"]:  # another gateway's, a proxy's: served
        headers = [(b"via", via.encode()), bearer]
        reply = await call(app, "POST", "/v1/responses", BODY, headers=headers)
        assert reply.status == 200, via
    assert len(backend.requests) == 2
