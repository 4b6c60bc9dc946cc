"""Traces through the SDK's in-memory exporter: a request with a gateway tool round is one
span with a child per round, each round's upstream attempt and tool call under it; only
allow-listed attributes, never a prompt; failures marked by class, not message. Attempts
and tool calls follow the GenAI semantic conventions (``chat {model}``, ``execute_tool
{tool}``), end to end through the real backends against the fake model server; with
tracing off (or a span the sampler dropped) nothing is built for them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanKind, StatusCode

from stateway.app.generation import build_backend
from stateway.backend_config import BackendConfig
from stateway.backends.admission import WaitingRoom
from stateway.config import ConfigError
from stateway.core.backend import Backend
from stateway.core.errors import UpstreamUnavailable
from stateway.core.gateway import Gateway
from stateway.core.inference import Finish, TextDelta
from stateway.core.loop import Loop
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.core.telemetry import NO_SPAN
from stateway.core.tools.ports import SearchHit
from stateway.core.tools.toolset import GatewayTools, ToolPolicy
from stateway.fake_upstream.launch import start_fake_upstream
from stateway.surfaces.http.app import build_http_app
from stateway.surfaces.http.chat import ChatRoutes
from stateway.surfaces.http.responses import ResponsesRoutes
from stateway.surfaces.http.service import ServiceRoutes
from stateway.telemetry import tracing
from stateway.telemetry.metrics import PrometheusMetrics
from stateway.telemetry.observability import Observability
from stateway.telemetry.tracing import ALLOWED_ATTRIBUTES, Tracing, check_tracing, open_tracing
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


def traced_app(
    exporter: InMemorySpanExporter,
    rounds: list[list[Any]],
    backend: Backend | None = None,
    provider: TracerProvider | None = None,
    search: FakeSearch | None = None,
) -> Any:
    """The HTTP app over ``backend`` (default: one scripted with ``rounds``), tracing
    into ``exporter`` (through ``provider``, if given); its web search ``search``."""
    provider = provider or TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = Observability(PrometheusMetrics(), Tracing(provider.get_tracer("test")))
    backend = backend or RoundsBackend(rounds)
    store = MemoryStore()
    search = search or FakeSearch([SearchHit("Stateway", "https://stateway.test", "A gateway.")])
    tools = GatewayTools(search=search, policy=ToolPolicy(timeout=5))
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    loop = Loop(store, tools=tools, telemetry=telemetry)
    gateway = Gateway(store, router, loop, RunRegistry(), telemetry=telemetry)
    return build_http_app(
        ResponsesRoutes(gateway, 1 << 20),
        ServiceRoutes(gateway),
        chat=ChatRoutes(gateway, 1 << 20),
        observer=telemetry,
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
    attempt = ["chat m", {}, []]
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
                            "execute_tool web_search",
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
    attempts = [s for s in spans if s.name == "chat m"]
    attributes = [dict(s.attributes or {}) for s in attempts]
    named = {(a["stateway.backend"], a["stateway.model"]) for a in attributes}
    assert named == {("scripted", "m")}


async def test_a_failed_attempt_is_marked_by_class_and_code(
    exporter: InMemorySpanExporter,
) -> None:
    app = traced_app(exporter, [[UpstreamUnavailable("upstream said: " + SECRET_PROMPT)]])
    reply = await http_call(app, "POST", "/v1/responses", create())
    assert reply.status >= 500
    [attempt] = [s for s in exporter.get_finished_spans() if s.name == "chat m"]
    assert attempt.status.status_code is StatusCode.ERROR
    assert attempt.status.description == "UpstreamUnavailable"
    attributes = dict(attempt.attributes or {})
    assert attributes["stateway.error"] == UpstreamUnavailable("x").code
    assert attributes["error.type"] == UpstreamUnavailable("x").code
    assert "gen_ai.response.finish_reasons" not in attributes  # no answer ended
    [request] = [s for s in exporter.get_finished_spans() if s.name == "POST /v1/responses"]
    assert request.status.status_code is StatusCode.ERROR


def attributes_of(spans: tuple[ReadableSpan, ...], name: str) -> list[dict[str, Any]]:
    return [dict(s.attributes or {}) for s in spans if s.name == name]


async def test_an_attempt_is_a_genai_inference_span(exporter: InMemorySpanExporter) -> None:
    app = traced_app(exporter, [answer()])
    body = {"model": "m", "input": SECRET_PROMPT, "temperature": 0.5, "top_p": 0.75}
    body["max_output_tokens"] = 64
    assert (await http_call(app, "POST", "/v1/responses", orjson.dumps(body))).status == 200
    [attempt] = [s for s in exporter.get_finished_spans() if s.name == "chat m"]
    assert attempt.kind is SpanKind.CLIENT
    assert dict(attempt.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",  # the scripted backend's api is "chat"
        "gen_ai.request.model": "m",
        "gen_ai.request.max_tokens": 64,
        "gen_ai.request.temperature": 0.5,
        "gen_ai.request.top_p": 0.75,
        "gen_ai.response.finish_reasons": ("stop",),
        "gen_ai.usage.input_tokens": 5,
        "gen_ai.usage.output_tokens": 1,
        "stateway.backend": "scripted",
        "stateway.model": "m",
    }


async def test_an_attempt_carries_every_numeric_setting_a_client_sent(
    exporter: InMemorySpanExporter,
) -> None:
    app = traced_app(exporter, [answer()])
    settings = {"top_k": 40, "seed": 7, "frequency_penalty": 0.5, "presence_penalty": -0.5}
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **settings}
    reply = await http_call(app, "POST", "/v1/chat/completions", orjson.dumps(body))
    assert reply.status == 200
    [attempt] = attributes_of(exporter.get_finished_spans(), "chat m")
    assert {k: v for k, v in attempt.items() if k.startswith("gen_ai.request.")} == {
        "gen_ai.request.model": "m",
        "gen_ai.request.top_k": 40,
        "gen_ai.request.seed": 7,
        "gen_ai.request.frequency_penalty": 0.5,
        "gen_ai.request.presence_penalty": -0.5,
    }


async def test_a_backend_of_an_api_the_conventions_do_not_name_is_named_as_itself(
    exporter: InMemorySpanExporter,
) -> None:
    backend = RoundsBackend([answer()])
    backend.api = "bedrock"
    app = traced_app(exporter, [], backend)
    assert (await http_call(app, "POST", "/v1/responses", create())).status == 200
    [attempt] = attributes_of(exporter.get_finished_spans(), "chat m")
    assert attempt["gen_ai.provider.name"] == "bedrock"


async def test_an_attempt_without_a_usage_report_counts_no_tokens(
    exporter: InMemorySpanExporter,
) -> None:
    app = traced_app(exporter, [[TextDelta("hi"), Finish("length")]])
    assert (await http_call(app, "POST", "/v1/responses", create())).status == 200
    [attempt] = attributes_of(exporter.get_finished_spans(), "chat m")
    assert attempt["gen_ai.response.finish_reasons"] == ("length",)
    assert "gen_ai.usage.input_tokens" not in attempt


async def test_a_gateway_tool_call_is_an_execute_tool_span(
    exporter: InMemorySpanExporter,
) -> None:
    app = traced_app(exporter, [tools_round(call("web_search", {"query": "q"})), answer()])
    reply = await http_call(app, "POST", "/v1/responses", create())
    [search] = [s for s in exporter.get_finished_spans() if s.name == "execute_tool web_search"]
    assert search.kind is SpanKind.INTERNAL
    [item] = [i for i in reply.json()["output"] if i["type"] == "web_search_call"]
    assert dict(search.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "web_search",
        "gen_ai.tool.type": "extension",
        "gen_ai.tool.call.id": item["id"],
        "stateway.tool": "web_search",
        "stateway.tool.name": "web search",
        "stateway.outcome": "ok",
    }
    [first, _] = attributes_of(exporter.get_finished_spans(), "chat m")
    assert first["gen_ai.response.finish_reasons"] == ("tool_calls",)


async def test_a_failed_tool_call_is_a_failed_span(exporter: InMemorySpanExporter) -> None:
    """A call that failed (its error handed to the model, the run going on) ended in an
    error all the same: the conventions want its span's status Error beside its
    ``error.type``, which trace searches for failures read."""
    failing = FakeSearch([], fail=True)
    rounds = [tools_round(call("web_search", {"query": "q"})), answer()]
    app = traced_app(exporter, rounds, search=failing)
    assert (await http_call(app, "POST", "/v1/responses", create())).status == 200
    [search] = [s for s in exporter.get_finished_spans() if s.name == "execute_tool web_search"]
    attributes = dict(search.attributes or {})
    assert (attributes["stateway.outcome"], attributes["error.type"]) == ("error", "protocol")
    assert search.status.status_code is StatusCode.ERROR
    assert search.status.description == "protocol"
    [request] = [s for s in exporter.get_finished_spans() if s.name == "POST /v1/responses"]
    assert request.status.status_code is StatusCode.UNSET  # the request itself succeeded


async def test_a_server_error_answer_has_its_status_as_error_type(
    exporter: InMemorySpanExporter,
) -> None:
    """HTTP's conventions: a server span answering 5xx has ``error.type`` set to the status
    code; a 4xx is the client's error, not the server's."""
    app = traced_app(exporter, [[UpstreamUnavailable("down")]])
    assert (await http_call(app, "POST", "/v1/responses", create())).status == 502
    assert (await http_call(app, "GET", "/v1/responses/resp_missing")).status == 404
    spans = exporter.get_finished_spans()
    [failed] = [s for s in spans if s.name == "POST /v1/responses"]
    assert dict(failed.attributes or {})["error.type"] == "502"
    [missing] = [s for s in spans if s.name == "GET /v1/responses/{response_id}"]
    assert "error.type" not in dict(missing.attributes or {})
    assert missing.status.status_code is StatusCode.UNSET


async def test_a_request_no_route_serves_is_named_by_its_method_alone(
    exporter: InMemorySpanExporter,
) -> None:
    """HTTP's conventions: ``http.route`` is the template of the route that matched, and
    a span without one is named ``{method}``; ``unmatched`` is the metrics' label, not a
    route."""
    app = traced_app(exporter, [answer()])
    assert (await http_call(app, "GET", "/no/such/route")).status == 404
    [span] = exporter.get_finished_spans()
    assert span.name == "GET"
    attributes = dict(span.attributes or {})
    assert "http.route" not in attributes
    assert attributes["http.response.status_code"] == 404


@pytest.fixture(scope="module")
def upstream_url() -> Iterator[str]:
    with start_fake_upstream() as url:
        yield url


@pytest.mark.parametrize(
    ("api", "provider", "response_id"),
    [
        ("chat", "openai", "chatcmpl-"),
        ("responses", "openai", "resp_"),
        ("anthropic", "anthropic", "msg_"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
async def test_a_real_backend_tells_its_upstream_answer(
    exporter: InMemorySpanExporter,
    upstream_url: str,
    api: str,
    provider: str,
    response_id: str,
    stream: bool,
) -> None:
    config = BackendConfig(name="fake", url=upstream_url, api=api)  # type: ignore[arg-type]
    backend = build_backend(config, WaitingRoom(8))
    try:
        app = traced_app(exporter, [], backend)
        body = {"model": "qwen3", "input": SECRET_PROMPT, "stream": stream, "temperature": 0.25}
        assert (await http_call(app, "POST", "/v1/responses", orjson.dumps(body))).status == 200
    finally:
        await backend.aclose()
    spans = exporter.get_finished_spans()
    [attempt] = [s for s in spans if s.name == "chat qwen3"]
    assert attempt.kind is SpanKind.CLIENT
    attributes = dict(attempt.attributes or {})
    host, port = urlsplit(upstream_url).hostname, urlsplit(upstream_url).port
    assert {k: attributes[k] for k in ("server.address", "server.port")} == {
        "server.address": host,
        "server.port": port,
    }
    assert attributes["gen_ai.provider.name"] == provider
    assert attributes["gen_ai.request.model"] == "qwen3"
    assert attributes["gen_ai.request.temperature"] == 0.25
    assert attributes["gen_ai.response.model"] == "qwen3"  # the fake answers as the model asked
    assert str(attributes["gen_ai.response.id"]).startswith(response_id)
    assert attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert int(attributes["gen_ai.usage.input_tokens"]) > 0  # type: ignore[call-overload]
    assert int(attributes["gen_ai.usage.output_tokens"]) > 0  # type: ignore[call-overload]
    for span in spans:
        assert set(span.attributes or {}) <= ALLOWED_ATTRIBUTES
        assert not any(SECRET_PROMPT in str(value) for value in (span.attributes or {}).values())


class Untouchable:
    """Fails the test if anything reads it."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"{name} read with tracing off")


def test_with_tracing_off_an_attempt_reads_and_builds_nothing() -> None:
    telemetry = Observability(PrometheusMetrics())
    untouched: Any = Untouchable()
    assert telemetry.attempt(untouched, untouched) is NO_SPAN
    assert telemetry.tool_call(untouched) is NO_SPAN
    assert telemetry.round(1) is NO_SPAN
    assert NO_SPAN.recording is False
    assert telemetry.request_span("POST", "req_x", []) is None  # the request observer opens none


@pytest.mark.parametrize("traced", [False, True])
async def test_a_backend_is_asked_for_its_answer_only_while_a_span_records(
    exporter: InMemorySpanExporter, traced: bool
) -> None:
    backend = RoundsBackend([answer()])
    if traced:
        app = traced_app(exporter, [], backend, TracerProvider(sampler=ALWAYS_OFF))
    else:
        store = MemoryStore()
        router = Router([BackendEntry(backend, {}, catch_all=True)])
        telemetry = Observability(PrometheusMetrics())
        loop = Loop(store, telemetry=telemetry)
        gateway = Gateway(store, router, loop, RunRegistry(), telemetry=telemetry)
        app = build_http_app(ResponsesRoutes(gateway, 1 << 20), ServiceRoutes(gateway))
    plain = orjson.dumps({"model": "m", "input": "hi"})
    assert (await http_call(app, "POST", "/v1/responses", plain)).status == 200
    [request] = backend.requests
    assert request.answered is None  # tracing off, or every span dropped by the sampler
    assert exporter.get_finished_spans() == ()


def test_tracing_is_off_unless_enabled() -> None:
    assert open_tracing(TracingConfig(), "0") is None
    enabled = TracingConfig(enabled=True)
    assert open_tracing(enabled, "0", {"OTEL_SDK_DISABLED": "true"}) is None


def test_enabled_tracing_exports_over_otlp_http() -> None:
    traced = open_tracing(TracingConfig(enabled=True), "1.2.3", {})
    assert traced is not None
    traced.shutdown()


def test_enabled_tracing_without_the_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(version: str, environ: Mapping[str, str] | None = None) -> TracerProvider:
        raise ModuleNotFoundError("No module named 'opentelemetry.sdk'", name="opentelemetry.sdk")

    monkeypatch.setattr(tracing, "otlp_provider", missing)
    with pytest.raises(
        ConfigError, match=r"\(opentelemetry.sdk is not installed\).*stateway\[otel\]"
    ):
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


def test_grpc_without_its_exporter_is_refused_by_name() -> None:
    """gRPC's exporter is in no extra (grpcio is large): the error names it, not the extra."""
    grpc = {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    with pytest.raises(ConfigError, match="pip install opentelemetry-exporter-otlp-proto-grpc"):
        open_tracing(TracingConfig(enabled=True), "0", grpc)
    with pytest.raises(ConfigError, match="opentelemetry-exporter-otlp-proto-grpc"):
        check_tracing(TracingConfig(enabled=True), grpc)


@pytest.mark.parametrize(
    "variable", ["OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"]
)
def test_a_protocol_no_exporter_speaks_is_refused_not_replaced(variable: str) -> None:
    """A typo, or OTLP's ``http/json``, would otherwise export http/protobuf where the
    collector expects something else: nothing arrives, and nothing says why."""
    environ = {variable: "http/json"}
    with pytest.raises(ConfigError, match=f"{variable} 'http/json'"):
        check_tracing(TracingConfig(enabled=True), environ)
    with pytest.raises(ConfigError, match="http/protobuf"):
        open_tracing(TracingConfig(enabled=True), "0", environ)
    check_tracing(TracingConfig(), environ)  # tracing off: the variable is not the gateway's


def test_the_traces_protocol_variable_wins_over_the_general_one() -> None:
    environ = {
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
    }
    check_tracing(TracingConfig(enabled=True), environ)
