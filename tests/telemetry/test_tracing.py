"""Traces through the SDK's in-memory exporter: a request with a gateway tool round is one
span with a child per round, each round's upstream attempt and tool call under it; only
allow-listed attributes, never a prompt; failures marked by class, not message."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from stateway.config import ConfigError
from stateway.core.errors import UpstreamUnavailable
from stateway.core.gateway import Gateway
from stateway.core.loop import Loop
from stateway.core.routing import BackendEntry, Router
from stateway.core.runs import RunRegistry
from stateway.core.tools.ports import SearchHit
from stateway.core.tools.toolset import GatewayTools, ToolPolicy
from stateway.surfaces.http.app import build_http_app
from stateway.surfaces.http.responses import ResponsesRoutes
from stateway.surfaces.http.service import ServiceRoutes
from stateway.telemetry import tracing
from stateway.telemetry.metrics import PrometheusMetrics
from stateway.telemetry.observability import Observability
from stateway.telemetry.tracing import ALLOWED_ATTRIBUTES, Tracing, open_tracing
from stateway.telemetry_config import TracingConfig
from tests.core.fakes import FakeSearch, MemoryStore, RoundsBackend
from tests.core.tools.test_tool_loop import answer, call, tools_round
from tests.surfaces.http.asgi import call as http_call

SECRET_PROMPT = "the secret prompt text"


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    yield spans
    spans.clear()


def traced_app(exporter: InMemorySpanExporter, rounds: list[list[Any]]) -> Any:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = Observability(PrometheusMetrics(), Tracing(provider.get_tracer("test")))
    backend = RoundsBackend(rounds)
    store = MemoryStore()
    search = FakeSearch([SearchHit("Stateway", "https://stateway.test", "A gateway.")])
    tools = GatewayTools(search=search, policy=ToolPolicy(timeout=5))
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    loop = Loop(store, tools=tools, telemetry=telemetry)
    gateway = Gateway(store, router, loop, RunRegistry(), telemetry=telemetry)
    return build_http_app(
        ResponsesRoutes(gateway, 1 << 20), ServiceRoutes(gateway), observer=telemetry
    )


def create(stream: bool = False) -> bytes:
    return orjson.dumps(
        {"model": "m", "input": SECRET_PROMPT, "tools": [{"type": "web_search"}], "stream": stream}
    )


def tree(spans: tuple[ReadableSpan, ...]) -> list[Any]:
    """``[name, attributes-of-note, [children...]]`` from the roots down, in start order."""
    by_parent: dict[int | None, list[ReadableSpan]] = {}
    for span in sorted(spans, key=lambda s: s.start_time or 0):
        parent = span.parent.span_id if span.parent is not None else None
        by_parent.setdefault(parent, []).append(span)

    def node(span: ReadableSpan) -> list[Any]:
        attributes = dict(span.attributes or {})
        noted = {
            k: attributes[k]
            for k in ("stateway.round", "stateway.tool", "stateway.outcome", "http.route")
            if k in attributes
        }
        children = by_parent.get(span.context.span_id, [])
        return [span.name, noted, [node(child) for child in children]]

    return [node(root) for root in by_parent.get(None, [])]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_request_with_a_tool_round_is_one_tree(
    exporter: InMemorySpanExporter, stream: bool
) -> None:
    app = traced_app(exporter, [tools_round(call("web_search", {"query": "stateway"})), answer()])
    reply = await http_call(app, "POST", "/v1/responses", create(stream))
    assert reply.status == 200
    attempt = ["stateway.attempt", {}, []]
    assert tree(exporter.get_finished_spans()) == [
        [
            "POST /v1/responses",
            {"http.route": "/v1/responses"},
            [
                [
                    "stateway.round",
                    {"stateway.round": 1},
                    [
                        attempt,
                        [
                            "stateway.tool_call",
                            {"stateway.tool": "web_search", "stateway.outcome": "ok"},
                            [],
                        ],
                    ],
                ],
                ["stateway.round", {"stateway.round": 2}, [attempt]],
            ],
        ]
    ]
    [request] = [s for s in exporter.get_finished_spans() if s.name == "POST /v1/responses"]
    assert request.attributes is not None
    assert request.attributes["stateway.request_id"] == reply.headers["x-request-id"]
    assert request.attributes["http.response.status_code"] == 200


async def test_attributes_are_allow_listed_and_carry_no_prompt(
    exporter: InMemorySpanExporter,
) -> None:
    app = traced_app(
        exporter, [tools_round(call("web_search", {"query": SECRET_PROMPT})), answer()]
    )
    await http_call(app, "POST", "/v1/responses", create())
    spans = exporter.get_finished_spans()
    assert spans
    for span in spans:
        attributes = dict(span.attributes or {})
        assert set(attributes) <= ALLOWED_ATTRIBUTES
        assert not any(SECRET_PROMPT in str(value) for value in attributes.values())
        assert SECRET_PROMPT not in span.name
    attempts = [s for s in spans if s.name == "stateway.attempt"]
    attributes = [dict(s.attributes or {}) for s in attempts]
    named = {(a["stateway.backend"], a["stateway.model"]) for a in attributes}
    assert named == {("scripted", "m")}


async def test_a_failed_attempt_is_marked_by_class_and_code(
    exporter: InMemorySpanExporter,
) -> None:
    app = traced_app(exporter, [[UpstreamUnavailable("upstream said: " + SECRET_PROMPT)]])
    reply = await http_call(app, "POST", "/v1/responses", create())
    assert reply.status >= 500
    [attempt] = [s for s in exporter.get_finished_spans() if s.name == "stateway.attempt"]
    assert attempt.status.status_code is StatusCode.ERROR
    assert attempt.status.description == "UpstreamUnavailable"
    assert dict(attempt.attributes or {})["stateway.error"] == UpstreamUnavailable("x").code
    [request] = [s for s in exporter.get_finished_spans() if s.name == "POST /v1/responses"]
    assert request.status.status_code is StatusCode.ERROR


def test_tracing_is_off_unless_enabled() -> None:
    assert open_tracing(TracingConfig(), "0") is None
    enabled = TracingConfig(enabled=True)
    assert open_tracing(enabled, "0", {"OTEL_SDK_DISABLED": "true"}) is None


def test_enabled_tracing_exports_over_otlp_http() -> None:
    traced = open_tracing(TracingConfig(enabled=True), "1.2.3", {})
    assert traced is not None
    traced.shutdown()


def test_enabled_tracing_without_the_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(version: str) -> TracerProvider:
        raise ModuleNotFoundError("No module named 'opentelemetry.sdk'", name="opentelemetry.sdk")

    monkeypatch.setattr(tracing, "otlp_provider", missing)
    with pytest.raises(ConfigError, match=r"stateway\[otel\]"):
        open_tracing(TracingConfig(enabled=True), "0", {})


def test_the_service_is_named_stateway_unless_the_environment_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    provider = tracing.otlp_provider("1.2.3")
    assert provider.resource.attributes["service.name"] == "stateway"
    assert provider.resource.attributes["service.version"] == "1.2.3"
    provider.shutdown()
    monkeypatch.setenv("OTEL_SERVICE_NAME", "edge-gateway")
    provider = tracing.otlp_provider("1.2.3")
    assert provider.resource.attributes["service.name"] == "edge-gateway"
    provider.shutdown()


def test_grpc_without_its_exporter_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    with pytest.raises(ConfigError, match="grpc"):
        open_tracing(TracingConfig(enabled=True), "0", {})
