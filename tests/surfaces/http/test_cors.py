"""Calls from the pages ``[server] cors_origins`` lists, in process: a preflight answered
before authentication, the methods the routes serve and any header allowed, a private
network too; a page not listed, or a method no route serves, gets no grant; an answer
exposes the headers the SDKs read, and never allows credentials."""

from __future__ import annotations

import pytest

from stateway.core.gateway import Gateway
from stateway.identity.key_cache import KeyCache
from stateway.surfaces.auth.authenticator import Authenticator
from stateway.surfaces.http.cors import EXPOSED
from tests.identity.test_key_cache import Clock, Store
from tests.surfaces.http.asgi import Reply, call
from tests.surfaces.http.test_express import build

PAGE = "http://localhost:5173"
OTHER = "https://evil.example"
SDK_HEADERS = "authorization, content-type, x-stainless-retry-count, openai-beta, mcp-param-x"


async def preflight(method: str, origin: str = PAGE, *extra: tuple[bytes, bytes]) -> Reply:
    """A browser's preflight of ``method`` on ``/v1/responses``, carrying no credential,
    to a gateway whose every request needs one."""
    authenticator = Authenticator(keys=KeyCache(Store(), 2.0, clock=Clock()))
    app, _, _ = build(Gateway, authenticator=authenticator, cors_origins=frozenset({PAGE}))
    asked = [
        (b"origin", origin.encode()),
        (b"access-control-request-method", method.encode()),
        (b"access-control-request-headers", SDK_HEADERS.encode()),
        *extra,
    ]
    return await call(app, "OPTIONS", "/v1/responses", headers=asked, content_type=None)


@pytest.mark.parametrize("method", ["GET", "POST", "DELETE"])
async def test_a_listed_pages_preflight_needs_no_credential_and_allows_what_the_sdks_send(
    method: str,
) -> None:
    reply = await preflight(method)
    assert reply.status == 200, reply.body
    assert reply.headers["access-control-allow-origin"] == PAGE
    assert method in reply.headers["access-control-allow-methods"].split(", ")
    assert reply.headers["access-control-allow-headers"] == SDK_HEADERS
    assert "access-control-allow-credentials" not in reply.headers


async def test_a_listed_page_may_call_a_gateway_on_a_private_network() -> None:
    reply = await preflight("POST", PAGE, (b"access-control-request-private-network", b"true"))
    assert reply.status == 200, reply.body
    assert reply.headers["access-control-allow-private-network"] == "true"


async def test_a_preflight_from_an_unlisted_page_is_refused() -> None:
    reply = await preflight("POST", OTHER)
    assert reply.status == 400
    assert "access-control-allow-origin" not in reply.headers


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
async def test_a_preflight_of_a_method_no_route_serves_is_refused(method: str) -> None:
    reply = await preflight(method)
    assert reply.status == 400
    assert method not in reply.headers["access-control-allow-methods"].split(", ")


async def test_an_answer_exposes_what_the_sdks_read_to_a_listed_page_only() -> None:
    app, _, _ = build(Gateway, cors_origins=frozenset({PAGE}))
    listed = await call(app, "GET", "/v1/models", headers=[(b"origin", PAGE.encode())])
    other = await call(app, "GET", "/v1/models", headers=[(b"origin", OTHER.encode())])
    assert (listed.status, other.status) == (200, 200)
    assert listed.headers["access-control-allow-origin"] == PAGE
    exposed = listed.headers["access-control-expose-headers"].split(", ")
    assert exposed == list(EXPOSED)
    assert {"x-request-id", "request-id", "retry-after", "mcp-session-id"} <= set(exposed)
    assert "access-control-allow-credentials" not in listed.headers
    assert "access-control-allow-origin" not in other.headers


async def test_any_page_is_answered_when_every_origin_is_listed() -> None:
    app, _, _ = build(Gateway, cors_origins=frozenset({"*"}))
    reply = await call(app, "GET", "/v1/models", headers=[(b"origin", OTHER.encode())])
    assert reply.headers["access-control-allow-origin"] == "*"
