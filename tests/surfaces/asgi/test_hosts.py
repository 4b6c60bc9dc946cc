"""The Host check: DNS-rebinding requests are refused before any route runs."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from starlette.types import Message, Receive, Scope, Send

from stateway.core.gateway import Gateway
from stateway.core.inference import Finish, TextDelta
from stateway.core.loop import Loop
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.server_config import ServerConfig
from stateway.surfaces.asgi.hosts import HostGuard, cross_site, host_name
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
        ("[FE80::A]:8080", "[fe80::a]"),  # an IPv6 literal's hex digits in any case
        ("[FE80::A", "[fe80::a"),
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


async def _echo(scope: Scope, receive: Receive, send: Send) -> None:
    """Answers with the body it read and the path it was called for."""
    message = await receive()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": scope["path"].encode() + message["body"]})


async def test_a_served_request_reaches_the_app_whole() -> None:
    guard = HostGuard(_echo, ["gw.internal"])

    reply = await call(guard, "POST", "/v1/x", b"body", headers=[(b"host", b"gw.internal")])

    assert (reply.status, reply.body) == (200, b"/v1/xbody")


async def test_a_refusal_names_the_host_and_the_setting() -> None:
    guard = HostGuard(_ok, ["gw.internal"])
    for headers, shown in [([(b"host", b"evil.example:80")], "'evil.example:80'"), ([], "''")]:
        reply = await call(guard, "GET", "/health", headers=headers)

        assert reply.json()["error"]["message"] == (
            f"The host name {shown} is not served here; see the allowed_hosts setting."
        )


async def test_an_empty_entry_serves_no_request_without_a_host() -> None:
    guard = HostGuard(_ok, ["", "gw.internal"])

    assert (await call(guard, "GET", "/health", headers=[])).status == 421


async def test_a_lifespan_passes_untouched() -> None:
    seen: list[tuple[Scope, Receive, Send]] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append((scope, receive, send))

    async def receive() -> Message:
        return {"type": "lifespan.startup"}

    async def send(message: Message) -> None:
        pass

    scope: Scope = {"type": "lifespan", "asgi": {"version": "3.0"}}
    await HostGuard(app, ["gw.internal"])(scope, receive, send)

    assert seen == [(scope, receive, send)]


def _upgrade(host: bytes, extensions: dict[str, object] | None) -> Scope:
    scope: Scope = {"type": "websocket", "path": "/v1/responses", "headers": [(b"host", host)]}
    if extensions is not None:  # a server may send none
        scope["extensions"] = extensions
    return scope


async def _refused_upgrade(extensions: dict[str, object] | None) -> list[Message]:
    sent: list[Message] = []
    reached: list[Scope] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        reached.append(scope)

    async def receive() -> Message:
        return {"type": "websocket.connect"}

    async def send(message: Message) -> None:
        sent.append(message)

    guard = HostGuard(app, ["gw.internal"])
    await guard(_upgrade(b"gw.internal", extensions), receive, send)
    assert len(reached) == 1  # a served upgrade reaches the app
    await guard(_upgrade(b"evil.example", extensions), receive, send)
    assert len(reached) == 1
    return sent


@pytest.mark.parametrize("extensions", [{}, None], ids=["some", "none"])
async def test_an_upgrade_to_a_host_not_served_is_closed_as_a_policy_violation(
    extensions: dict[str, object] | None,
) -> None:
    [close] = await _refused_upgrade(extensions)

    assert close == {
        "type": "websocket.close",
        "code": 1008,
        "reason": "The host name 'evil.example' is not served here; see the allowed_hosts setting.",
    }


async def test_a_server_that_can_answer_an_upgrade_in_http_is_sent_the_421() -> None:
    sent = await _refused_upgrade({"websocket.http.response": {}})

    assert sent[0]["type"] == "websocket.http.response.start"
    assert sent[0]["status"] == 421
    body = b"".join(m.get("body", b"") for m in sent[1:])
    assert b"host_not_allowed" in body


@pytest.mark.parametrize(
    ("headers", "crossed"),
    [
        ([(b"host", b"gw:8080")], False),  # no Origin: no browser
        ([(b"host", b"gw:8080"), (b"origin", b"http://gw:8080")], False),
        ([(b"host", b"GW:8080"), (b"origin", b"http://gw:8080")], False),
        ([(b"origin", b"http://GW:8080"), (b"host", b"gw:8080")], False),
        ([(b"host", b"gw:8080"), (b"origin", b"http://gw:8081")], True),
        ([(b"host", b"gw:8080"), (b"origin", b"http://evil.example")], True),
        ([(b"origin", b"http://gw:8080")], True),  # no Host to be the same as
        ([(b"host", b"gw"), (b"origin", b"http://[gw")], True),  # unreadable
        ([(b"host", b"g\xe9w"), (b"origin", b"http://g\xe9w")], False),
    ],
    ids=["none", "same", "host-cased", "origin-cased", "port", "site", "no-host", "bad", "latin"],
)
def test_cross_site_is_an_origin_other_than_the_host(
    headers: list[tuple[bytes, bytes]], crossed: bool
) -> None:
    assert cross_site({"type": "websocket", "headers": headers}) is crossed


@pytest.mark.parametrize(
    ("origin", "origins", "crossed"),
    [
        (b"http://localhost:5173", {"http://localhost:5173"}, False),
        (b"http://LocalHost:5173", {"http://localhost:5173"}, False),
        (b"http://localhost:5174", {"http://localhost:5173"}, True),
        (b"https://localhost:5173", {"http://localhost:5173"}, True),
        (b"https://evil.example", {"*"}, False),
        (b"null", {"*"}, False),
        (b"null", {"http://localhost:5173"}, True),
    ],
)
def test_a_listed_origin_is_not_cross_site(origin: bytes, origins: set[str], crossed: bool) -> None:
    """``[server] cors_origins``: the pages allowed to call the gateway from a browser,
    their WebSocket upgrades and MCP requests too (``"*"``: any page's)."""
    headers = [(b"host", b"gw:8080"), (b"origin", origin)]
    assert cross_site({"type": "websocket", "headers": headers}, frozenset(origins)) is crossed
