"""OpenTelemetry traces: the request's span and the core's spans under it (an attempt's
and a tool call's following the GenAI semantic conventions: :mod:`.genai`).

Spans are made through the OpenTelemetry API on a tracer this object is given: the SDK
tracer provider :func:`otlp_provider` builds when ``[tracing] enabled`` (exporting in
batches over OTLP, configured by the standard ``OTEL_*`` variables), or any provider a
test gives (the SDK's in-memory exporter). Nothing is set globally.

Attributes are allow-listed (:data:`ALLOWED_ATTRIBUTES`): a key not on the list is
dropped, so no prompt, output or tool argument can reach a trace by accident. An
exception leaving a span marks it failed with the exception's class and its
``error.type`` (the gateway error's code, else the class), never its message; a cancelled
block (the client left) is marked as such, not failed.

Trace context is W3C's (``traceparent``, ``tracestate``; never baggage, which would carry
a client's values on): a request's span continues the trace its client names, and while a
span is open :data:`~stateway.core.telemetry.TRACE_HEADERS` holds its own, which the
backends send upstream. A span the sampler dropped still propagates, as unsampled.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final

from opentelemetry.context import Context
from opentelemetry.trace import Span as OtelSpan
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from stateway.config import ConfigError
from stateway.core.backend import Backend
from stateway.core.errors import GatewayError
from stateway.core.inference import Answered, InferenceRequest
from stateway.core.telemetry import TRACE_HEADERS, AttemptSpan, Attribute, Span, ToolCall
from stateway.core.usage import Usage
from stateway.surfaces.http.observed import UNMATCHED
from stateway.telemetry import genai
from stateway.telemetry_config import TracingConfig

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

ALLOWED_ATTRIBUTES: Final = frozenset(
    {
        "http.request.method",
        "http.route",
        "http.response.status_code",
        "stateway.request_id",
        "stateway.round",
        "stateway.backend",
        "stateway.model",
        "stateway.outcome",
        "stateway.tool",
        "stateway.tool.name",
        "stateway.error",
        *genai.GENAI_ATTRIBUTES,
    }
)
"""Every attribute a span may carry: names of routes, models, backends and tools,
numbers, ids and outcomes; nothing a client wrote."""

ERROR_TYPE: Final = "error.type"
"""What a failed span's error was (the conventions' attribute, on every kind of span)."""

ROUND: Final = "stateway.round"
"""A round's span, and the attribute holding its number (from 1)."""

SERVICE_NAME: Final = "stateway"
"""``service.name`` unless ``OTEL_SERVICE_NAME`` or ``OTEL_RESOURCE_ATTRIBUTES`` say."""

EXPORTERS: Final = {
    "http/protobuf": "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "grpc": "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
}
"""The module of each OTLP protocol's span exporter (OTLP's ``http/json`` has none)."""

TRACE_CONTEXT: Final = TraceContextTextMapPropagator()
"""Reads and writes the W3C ``traceparent`` and ``tracestate`` headers."""
_CONTEXT_HEADERS: Final = frozenset(name.encode() for name in TRACE_CONTEXT.fields)

_PROTOCOL_VARIABLES: Final = (
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
)
"""Where the protocol is named, the first set winning, as the OpenTelemetry SDK reads them."""


class AllowedSpan:
    """An OpenTelemetry span as the core's :class:`~stateway.core.telemetry.Span`."""

    __slots__ = ("_span", "recording")

    def __init__(self, span: OtelSpan) -> None:
        self._span = span
        self.recording = span.is_recording()

    def set(self, key: str, value: Attribute) -> None:
        if key in ALLOWED_ATTRIBUTES:
            self._span.set_attribute(key, value)

    def failed(self, error_type: str) -> None:
        self._span.set_attribute(ERROR_TYPE, error_type)
        self._span.set_status(Status(StatusCode.ERROR, error_type))


class InferenceSpan(AllowedSpan):
    """An upstream attempt's span (:class:`~stateway.core.telemetry.AttemptSpan`)."""

    __slots__ = ()

    def answered(self, reason: str, usage: Usage | None, noted: Answered | None) -> None:
        self._span.set_attributes(_allowed(genai.answer(reason, usage, noted)))


class RequestSpan:
    """The span of one HTTP request (or WebSocket session), named once it is routed."""

    __slots__ = ("_method", "_span")

    def __init__(self, span: OtelSpan, method: str) -> None:
        self._span = span
        self._method = method

    def finish(self, route: str, status: int) -> None:
        """Name the span by its route (``POST /v1/responses``) and record its status; a
        request no route serves keeps its method alone as its name, without
        ``http.route`` (HTTP's conventions: the route is a template that matched)."""
        self._span.set_attribute("http.response.status_code", status)
        if route != UNMATCHED:
            self._span.set_attribute("http.route", route)
            self._span.update_name(f"{self._method} {route}")
        if status >= 500:  # HTTP's conventions: a server's own error, typed by its status
            self._span.set_attribute(ERROR_TYPE, str(status))
            self._span.set_status(Status(StatusCode.ERROR, f"HTTP {status}"))


class Tracing:
    def __init__(self, tracer: Tracer, provider: TracerProvider | None = None) -> None:
        """``provider``: shut down (its spans flushed) by :meth:`shutdown`."""
        self._tracer = tracer
        self._provider = provider

    @contextmanager
    def round(self, number: int) -> Iterator[Span]:
        with self._started(ROUND, {ROUND: number}, SpanKind.INTERNAL) as span:
            yield AllowedSpan(span)

    @contextmanager
    def attempt(self, backend: Backend, request: InferenceRequest) -> Iterator[AttemptSpan]:
        name, attributes = genai.inference(backend, request)
        with self._started(name, attributes, SpanKind.CLIENT) as span:
            yield InferenceSpan(span)

    @contextmanager
    def tool_call(self, call: ToolCall) -> Iterator[Span]:
        name, attributes = genai.tool_call(call)
        with self._started(name, attributes, SpanKind.INTERNAL) as span:
            yield AllowedSpan(span)

    @contextmanager
    def request_span(
        self, method: str, request_id: str, headers: Iterable[tuple[bytes, bytes]]
    ) -> Iterator[RequestSpan]:
        """A request's span, the child of the one its ``traceparent`` header names (a
        malformed one is ignored: the trace starts here)."""
        attributes = {"http.request.method": method, "stateway.request_id": request_id}
        parent = _continued(headers)
        with self._started(method, attributes, SpanKind.SERVER, parent) as span:
            yield RequestSpan(span, method)

    @contextmanager
    def _started(
        self,
        name: str,
        attributes: Mapping[str, AttributeValue],
        kind: SpanKind,
        parent: Context | None = None,
    ) -> Iterator[OtelSpan]:
        with self._tracer.start_as_current_span(
            name,
            context=parent,
            kind=kind,
            attributes=_allowed(attributes),
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            carrier: dict[str, str] = {}
            TRACE_CONTEXT.inject(carrier)  # the span just made current
            propagated = TRACE_HEADERS.set(carrier)
            try:
                yield span
            except asyncio.CancelledError:
                span.set_attribute("stateway.outcome", "cancelled")
                raise
            except BaseException as exc:
                if isinstance(exc, GatewayError):
                    error = exc.code or exc.type
                    span.set_attribute("stateway.error", error)
                else:
                    error = type(exc).__qualname__
                span.set_attribute(ERROR_TYPE, error)
                span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
                raise
            finally:
                TRACE_HEADERS.reset(propagated)

    def shutdown(self) -> None:
        """Export what is buffered and stop (the provider's batch processor)."""
        if self._provider is not None:
            self._provider.shutdown()


def _continued(headers: Iterable[tuple[bytes, bytes]]) -> Context | None:
    """The context of the trace a request's headers continue; None when they name none."""
    carrier = {
        name.decode(): value.decode("latin-1")
        for name, value in headers
        if name in _CONTEXT_HEADERS
    }
    return TRACE_CONTEXT.extract(carrier) if carrier else None


def _allowed(attributes: Mapping[str, AttributeValue]) -> dict[str, AttributeValue]:
    return {k: v for k, v in attributes.items() if k in ALLOWED_ATTRIBUTES}


def open_tracing(
    config: TracingConfig, version: str, environ: Mapping[str, str] | None = None
) -> Tracing | None:
    """Traces exported over OTLP when ``[tracing] enabled`` (and ``OTEL_SDK_DISABLED`` is
    not true); None otherwise. Raises :class:`~stateway.config.ConfigError` as
    :func:`check_tracing` does."""
    env = os.environ if environ is None else environ
    if not _enabled(config, env):
        return None
    check_tracing(config, env)
    try:
        provider = otlp_provider(version, env)
    except ImportError as exc:
        raise _not_installed(exc.name) from None
    return Tracing(provider.get_tracer("stateway", version), provider)


def check_tracing(config: TracingConfig, environ: Mapping[str, str] | None = None) -> None:
    """Raise :class:`~stateway.config.ConfigError` where :func:`open_tracing` would, so
    that ``stateway check-config`` refuses what serving refuses, exporting nothing: the
    SDK or the protocol's exporter not installed, or a protocol no exporter speaks."""
    env = os.environ if environ is None else environ
    if not _enabled(config, env):
        return
    protocol, module = _exporter_module(env)
    for name in ("opentelemetry.sdk.trace", module):
        try:
            importlib.import_module(name)
        except ImportError as exc:
            if name == module and protocol == "grpc":  # left out of the extra: grpcio is large
                raise ConfigError(
                    "tracing.enabled over grpc needs its OTLP exporter, which the otel extra "
                    "leaves out: pip install opentelemetry-exporter-otlp-proto-grpc, or "
                    "export over http/protobuf"
                ) from None
            raise _not_installed(exc.name) from None


def _enabled(config: TracingConfig, env: Mapping[str, str]) -> bool:
    return config.enabled and env.get("OTEL_SDK_DISABLED", "").lower() != "true"


def _not_installed(name: str | None) -> ConfigError:
    return ConfigError(
        f"tracing.enabled needs the OpenTelemetry SDK and OTLP exporter ({name} is "
        "not installed): pip install 'stateway[otel]'"
    )


def _exporter_module(env: Mapping[str, str]) -> tuple[str, str]:
    """The protocol the environment names (``http/protobuf`` by default) and its
    exporter's module; :class:`~stateway.config.ConfigError` for one no exporter speaks
    (a typo would otherwise export nowhere, silently)."""
    variable = next((name for name in _PROTOCOL_VARIABLES if env.get(name)), None)
    protocol = "http/protobuf" if variable is None else env[variable]
    if protocol not in EXPORTERS:
        raise ConfigError(
            f"{variable} {protocol!r}: traces are exported over OTLP as http/protobuf "
            "(the default) or grpc"
        )
    return protocol, EXPORTERS[protocol]


def otlp_provider(version: str, environ: Mapping[str, str] | None = None) -> TracerProvider:
    """An SDK tracer provider exporting in batches over OTLP: the endpoint, headers,
    timeout, compression, sampler and resource come from the standard ``OTEL_*``
    variables; ``OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL`` (of ``environ``, by default the
    process's) picks ``http/protobuf`` (the default) or ``grpc`` (needs
    ``opentelemetry-exporter-otlp-proto-grpc``). Raises ``ImportError`` naming what is
    missing (:class:`~stateway.config.ConfigError` for a protocol no exporter speaks)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({"service.version": version})
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
    provider = TracerProvider(resource=resource)
    _, module = _exporter_module(os.environ if environ is None else environ)
    exporter: SpanExporter = importlib.import_module(module).OTLPSpanExporter()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider
