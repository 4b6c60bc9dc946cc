"""``GET /v1/usage`` (own tenant, or any for the admin; another tenant looks empty; bad
times refused) and ``GET /metrics`` (the exposition; an authorizer, when given, decides)."""

from __future__ import annotations

import datetime
from typing import Any

from starlette.requests import Request

from stateway.core.accounting import UsageBucket
from stateway.core.commands import GetUsage
from stateway.core.errors import Unauthorized
from stateway.core.gateway import Gateway
from stateway.core.loop import Loop
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.identity.key_cache import KeyCache
from stateway.surfaces.auth.authenticator import Authenticator
from stateway.surfaces.http.admin import AdminRoutes, require_admin
from stateway.surfaces.http.app import build_http_app
from stateway.surfaces.http.metrics import MetricsRoutes
from stateway.surfaces.http.responses import ResponsesRoutes
from stateway.surfaces.http.service import ServiceRoutes
from stateway.surfaces.http.usage import UsageRoutes
from stateway.telemetry.metrics import PrometheusMetrics
from tests.core.fakes import MemoryStore, ScriptedBackend
from tests.identity.test_key_cache import Clock, Store
from tests.surfaces.auth.test_authenticator import keyed
from tests.surfaces.http.asgi import call

KEY = "admin-secret"
ADMIN = [(b"authorization", f"Bearer {KEY}".encode())]
DAY = datetime.date(2026, 12, 1)


class Ledger:
    def __init__(self) -> None:
        self.asked: list[GetUsage] = []

    async def usage(self, query: GetUsage) -> list[UsageBucket]:
        self.asked.append(query)
        return [UsageBucket(query.tenant_id or "t1", "m", DAY, 2, 30, 12)]


def build(
    ledger: Ledger | None,
    metrics: MetricsRoutes | None = None,
    authenticator: Authenticator | None = None,
) -> Any:
    store = MemoryStore()
    router = Router([BackendEntry(ScriptedBackend([]), {}, catch_all=True)])
    gateway = Gateway(store, router, Loop(store), RunRegistry(), usage=ledger)
    return build_http_app(
        ResponsesRoutes(gateway, 4096),
        ServiceRoutes(gateway),
        admin=AdminRoutes(gateway, reload_endpoint=False),
        usage=UsageRoutes(gateway),
        metrics=metrics,
        authenticator=authenticator or Authenticator(admin_key=KEY),
    )


async def with_keys() -> tuple[Authenticator, str]:
    """Auth configured: one API key, of tenant acme."""
    store = Store()
    key, _ = await keyed(store, tenant="acme")
    return Authenticator(keys=KeyCache(store, 2.0, clock=Clock()), admin_key=KEY), key


async def test_a_caller_sees_its_own_tenant() -> None:
    ledger = Ledger()
    reply = await call(build(ledger), "GET", "/v1/usage", query="start_time=10", content_type=None)
    assert reply.status == 200
    assert reply.json() == {
        "object": "list",
        "data": [
            {
                "object": "usage.bucket",
                "tenant": "default",
                "model": "m",
                "date": "2026-12-01",
                "responses": 2,
                "input_tokens": 30,
                "output_tokens": 12,
                "total_tokens": 42,
            }
        ],
    }
    assert ledger.asked == [GetUsage("default", 10.0, None)]


async def test_another_tenant_looks_like_one_without_usage() -> None:
    ledger = Ledger()
    app = build(ledger)
    reply = await call(app, "GET", "/v1/usage", query="tenant=acme", content_type=None)
    assert reply.json() == {"object": "list", "data": []}
    assert ledger.asked == []
    wrong_key = [(b"authorization", b"Bearer not-the-key")]
    reply = await call(
        app, "GET", "/v1/usage", query="tenant=acme", content_type=None, headers=wrong_key
    )
    assert reply.json()["data"] == []


async def test_the_admin_sees_every_tenant_or_the_one_named() -> None:
    ledger = Ledger()
    app = build(ledger)
    await call(app, "GET", "/v1/usage", content_type=None, headers=ADMIN)
    query = "tenant=acme&start_time=1&end_time=2"
    await call(app, "GET", "/v1/usage", query=query, content_type=None, headers=ADMIN)
    assert ledger.asked == [GetUsage(None), GetUsage("acme", 1.0, 2.0)]


async def test_times_must_be_whole_unix_seconds() -> None:
    for query, param in [("start_time=soon", "start_time"), ("end_time=1.5", "end_time")]:
        reply = await call(build(Ledger()), "GET", "/v1/usage", query=query, content_type=None)
        assert reply.status == 400
        assert reply.json()["error"]["param"] == param
        assert reply.json()["error"]["code"] == "invalid_value"
    sent = "1" * 30 + "x" * 30  # quoted up to 40 characters
    reply = await call(build(Ledger()), "GET", "/v1/usage", query=f"end_time={sent}")
    assert reply.json()["error"]["message"] == (
        f"'end_time' must be Unix seconds (a whole number), got '{sent[:40]}'."
    )


async def test_without_a_ledger_usage_is_not_served() -> None:
    reply = await call(build(None), "GET", "/v1/usage", content_type=None)
    assert reply.status == 404


async def test_metrics_are_served_in_the_text_format() -> None:
    metrics = PrometheusMetrics()
    metrics.request_ended("/health", 200, 0.001)
    app = build(None, MetricsRoutes(metrics.exposition))
    reply = await call(app, "GET", "/metrics", content_type=None)
    assert reply.status == 200
    assert reply.headers["content-type"].startswith("text/plain")
    assert b'stateway_requests_total{route="/health",status="200"} 1.0' in reply.body


async def test_an_authorizer_decides_who_reads_metrics() -> None:
    async def admins_only(request: Request) -> None:
        if request.headers.get("authorization") != f"Bearer {KEY}":
            raise Unauthorized("Metrics need the admin key.")

    app = build(None, MetricsRoutes(PrometheusMetrics().exposition, admins_only))
    assert (await call(app, "GET", "/metrics", content_type=None)).status == 401
    reply = await call(app, "GET", "/metrics", content_type=None, headers=ADMIN)
    assert reply.status == 200


async def test_with_auth_a_key_sees_its_own_tenant_only() -> None:
    ledger = Ledger()
    authenticator, key = await with_keys()
    app = build(ledger, authenticator=authenticator)
    bearer = [(b"authorization", f"Bearer {key}".encode())]

    own = await call(app, "GET", "/v1/usage", content_type=None, headers=bearer)
    other = await call(
        app, "GET", "/v1/usage", query="tenant=t1", content_type=None, headers=bearer
    )
    nobody = await call(app, "GET", "/v1/usage", content_type=None)

    assert own.json()["data"][0]["tenant"] == "acme"
    assert other.json()["data"] == []
    assert nobody.status == 401
    assert ledger.asked == [GetUsage("acme")]
    await call(app, "GET", "/v1/usage", content_type=None, headers=ADMIN)
    assert ledger.asked[-1] == GetUsage(None)


async def test_with_auth_metrics_are_for_the_admin_credential() -> None:
    authenticator, key = await with_keys()
    metrics = MetricsRoutes(PrometheusMetrics().exposition, require_admin)
    app = build(None, metrics, authenticator)

    assert (await call(app, "GET", "/metrics", content_type=None)).status == 401
    tenant = [(b"x-api-key", key.encode())]
    assert (await call(app, "GET", "/metrics", content_type=None, headers=tenant)).status == 403
    assert (await call(app, "GET", "/metrics", content_type=None, headers=ADMIN)).status == 200
