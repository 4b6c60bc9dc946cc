"""W3C trace context across the gateway, with tracing on: a request's span continues the
trace a client's ``traceparent`` names, and each upstream call carries its own span's
``traceparent`` (an attempt's; a relayed Chat answer's, the request's), so a model server
that traces (vLLM with ``--otlp-traces-endpoint``) parents its spans under the gateway's.
With tracing off nothing is read or sent. Through the real backends against the fake
model server, whose request log keeps the header."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanKind

from stateway.app.generation import build_backend
from stateway.backend_config import BackendConfig
from stateway.backends.admission import WaitingRoom
from stateway.core.gateway import Gateway
from stateway.core.loop import Loop
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.core.tools.ports import McpServer
from stateway.fake_upstream.launch import start_fake_upstream
from stateway.mcp_client.pool import PooledMcpClient
from stateway.surfaces.http.app import build_http_app
from stateway.surfaces.http.chat import ChatRoutes
from stateway.surfaces.http.responses import ResponsesRoutes
from stateway.surfaces.http.service import ServiceRoutes
from stateway.telemetry.metrics import PrometheusMetrics
from stateway.telemetry.observability import Observability
from stateway.telemetry.tracing import Tracing
from tests.core.fakes import MemoryStore
from tests.e2e.routing import fake_requests
from tests.support.mcp_server import serve_mcp
from tests.surfaces.http.asgi import call as http_call
from tests.telemetry.test_tracing import traced_app

CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"
CLIENT_PARENT = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"


@pytest.fixture(scope="module")
def upstream_url() -> Iterator[str]:
    with start_fake_upstream() as url:
        yield url


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    yield spans
    spans.clear()


def traceparent(span: ReadableSpan) -> str:
    """The ``traceparent`` naming ``span``, its flags left out (sampled, and the SDK's
    random trace id flag of W3C's level 2)."""
    context = span.get_span_context()
    assert context is not None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}"


def parent_of(sent: str) -> str:
    """A sent ``traceparent`` without its flags, which say it was sampled."""
    parent, _, flags = sent.rpartition("-")
    assert int(flags, 16) & 1  # sampled
    return parent


async def served(app: Any, path: str, body: dict[str, Any], *headers: tuple[bytes, bytes]) -> None:
    reply = await http_call(app, "POST", path, orjson.dumps(body), headers=list(headers))
    assert reply.status == 200, reply.body


def sent_headers(upstream_url: str, marker: str) -> dict[str, str]:
    [logged] = fake_requests(upstream_url, marker)
    headers: dict[str, str] = logged["headers"]
    return headers


@pytest.mark.parametrize("api", ["chat", "responses", "anthropic"])
@pytest.mark.parametrize("stream", [False, True])
async def test_an_attempt_sends_its_spans_traceparent_upstream(
    exporter: InMemorySpanExporter, upstream_url: str, api: str, stream: bool
) -> None:
    backend = build_backend(BackendConfig(name="fake", url=upstream_url, api=api), WaitingRoom(8))  # type: ignore[arg-type]
    marker = f"attempt-{api}-{stream}"
    try:
        app = traced_app(exporter, [], backend)
        await served(app, "/v1/responses", {"model": "qwen3", "input": marker, "stream": stream})
    finally:
        await backend.aclose()
    [attempt] = [s for s in exporter.get_finished_spans() if s.name == "chat qwen3"]
    assert parent_of(sent_headers(upstream_url, marker)["traceparent"]) == traceparent(attempt)


async def test_a_request_continues_the_trace_its_client_names(
    exporter: InMemorySpanExporter, upstream_url: str
) -> None:
    backend = build_backend(BackendConfig(name="fake", url=upstream_url), WaitingRoom(8))
    marker = "continued"
    try:
        app = traced_app(exporter, [], backend)
        body = {"model": "qwen3", "input": marker}
        await served(app, "/v1/responses", body, (b"traceparent", CLIENT_PARENT.encode()))
    finally:
        await backend.aclose()
    spans = exporter.get_finished_spans()
    [request] = [s for s in spans if s.kind is SpanKind.SERVER]
    assert request.parent is not None
    assert request.parent.is_remote
    assert f"{request.parent.span_id:016x}" == CLIENT_SPAN
    assert {f"{s.context.trace_id:032x}" for s in spans} == {CLIENT_TRACE}
    sent = sent_headers(upstream_url, marker)["traceparent"]
    assert sent.startswith(f"00-{CLIENT_TRACE}-")
    assert CLIENT_SPAN not in sent


@pytest.mark.parametrize(
    "malformed", [b"garbage", b"00-" + b"0" * 32 + b"-" + b"0" * 16 + b"-01", b"\xff" * 60]
)
async def test_a_malformed_traceparent_starts_a_trace_of_its_own(
    exporter: InMemorySpanExporter, malformed: bytes
) -> None:
    app = traced_app(exporter, [[]])
    await served(app, "/v1/responses", {"model": "m", "input": "hi"}, (b"traceparent", malformed))
    [request] = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.SERVER]
    assert request.parent is None


async def test_a_relayed_chat_request_sends_the_requests_traceparent(
    exporter: InMemorySpanExporter, upstream_url: str
) -> None:
    backend = build_backend(BackendConfig(name="fake", url=upstream_url), WaitingRoom(8))
    marker = "relayed"
    try:
        app = traced_app(exporter, [], backend)
        body = {"model": "qwen3", "messages": [{"role": "user", "content": marker}]}
        await served(app, "/v1/chat/completions", body)
    finally:
        await backend.aclose()
    [request] = exporter.get_finished_spans()  # the fast path: the request's span only
    assert parent_of(sent_headers(upstream_url, marker)["traceparent"]) == traceparent(request)


async def test_a_trace_the_sampler_drops_is_still_propagated_unsampled(
    exporter: InMemorySpanExporter, upstream_url: str
) -> None:
    backend = build_backend(BackendConfig(name="fake", url=upstream_url), WaitingRoom(8))
    marker = "unsampled"
    try:
        app = traced_app(exporter, [], backend, TracerProvider(sampler=ALWAYS_OFF))
        await served(app, "/v1/responses", {"model": "qwen3", "input": marker})
    finally:
        await backend.aclose()
    assert exporter.get_finished_spans() == ()
    flags = sent_headers(upstream_url, marker)["traceparent"].rpartition("-")[2]
    assert not int(flags, 16) & 1  # not sampled


@dataclass(frozen=True)
class McpCall:
    """A gateway tool call as its span names it (:class:`~stateway.core.telemetry.ToolCall`)."""

    kind: str = "mcp"
    label: str = "test.echo"
    name: str = "echo"
    call_id: str | None = "mcp_1"


@pytest.mark.parametrize("transport", ["streamable_http", "sse"])
async def test_an_mcp_call_carries_its_spans_trace_context_in_its_meta(
    exporter: InMemorySpanExporter, transport: str
) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = Tracing(provider.get_tracer("test"))
    pool = PooledMcpClient(connect_timeout=5.0)
    with serve_mcp() as running:
        url = running.sse_url if transport == "sse" else running.url
        server = McpServer(label="test", url=url, transport=transport)  # type: ignore[arg-type]
        try:
            with tracing.tool_call(McpCall()):
                assert await pool.call_tool(server, "echo", {"text": "hi"}) == "hi"
            assert await pool.call_tool(server, "echo", {"text": "untraced"}) == "untraced"
        finally:
            await pool.aclose()
        traced, untraced = running.stats.traceparents
    [span] = exporter.get_finished_spans()
    assert traced is not None
    assert parent_of(traced) == traceparent(span)
    assert untraced is None


async def test_with_tracing_off_no_trace_context_is_sent(upstream_url: str) -> None:
    backend = build_backend(BackendConfig(name="fake", url=upstream_url), WaitingRoom(8))
    marker = "untraced-"
    try:
        store = MemoryStore()
        router = Router([BackendEntry(backend, {}, catch_all=True)])
        telemetry = Observability(PrometheusMetrics())
        gateway = Gateway(store, router, Loop(store, telemetry=telemetry), RunRegistry())
        app = build_http_app(
            ResponsesRoutes(gateway, 1 << 20),
            ServiceRoutes(gateway),
            chat=ChatRoutes(gateway, 1 << 20),
            observer=telemetry,
        )
        client = (b"traceparent", CLIENT_PARENT.encode())
        await served(
            app, "/v1/responses", {"model": "qwen3", "input": marker + "responses"}, client
        )
        chat = {"model": "qwen3", "messages": [{"role": "user", "content": marker + "chat"}]}
        await served(app, "/v1/chat/completions", chat, client)
    finally:
        await backend.aclose()
    assert "traceparent" not in sent_headers(upstream_url, marker + "responses")
    assert "traceparent" not in sent_headers(upstream_url, marker + "chat")
