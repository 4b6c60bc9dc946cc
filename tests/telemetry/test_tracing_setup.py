"""Tracing's set-up and end: what ``open_tracing`` and ``check_tracing`` read and refuse,
the tracer they make, the spans buffered until shutdown, and a server error's request span
(the spans through the SDK's in-memory exporter)."""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from stateway.config import ConfigError
from stateway.telemetry import tracing
from stateway.telemetry.tracing import Tracing, check_tracing, open_tracing
from stateway.telemetry_config import TracingConfig

ENABLED = TracingConfig(enabled=True)
HTTP_EXPORTER = "opentelemetry.exporter.otlp.proto.http.trace_exporter"


@pytest.mark.parametrize(("status", "failed"), [(500, True), (503, True), (499, False)])
def test_a_request_answered_with_a_server_error_is_a_failed_span(status: int, failed: bool) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    traced = Tracing(provider.get_tracer("test"))

    with traced.request_span("GET", "req_1", []) as span:
        span.finish("/health", status)

    [finished] = exporter.get_finished_spans()
    attributes = dict(finished.attributes or {})
    if failed:
        assert attributes["error.type"] == str(status)
        assert finished.status.status_code is StatusCode.ERROR
        assert finished.status.description == f"HTTP {status}"
    else:
        assert "error.type" not in attributes
        assert finished.status.status_code is StatusCode.UNSET


def test_spans_are_exported_in_batches_and_flushed_at_shutdown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tracer is the gateway's (``stateway``, its version), on the provider built from
    the environment given, and what is buffered is exported when tracing shuts down."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=3_600_000))
    built: list[tuple[str, Mapping[str, str] | None]] = []

    def otlp_provider(version: str, environ: Mapping[str, str] | None = None) -> TracerProvider:
        built.append((version, environ))
        return provider

    monkeypatch.setattr(tracing, "otlp_provider", otlp_provider)
    environ = {"OTEL_SERVICE_NAME": "edge"}
    traced = open_tracing(ENABLED, "1.2.3", environ)
    assert traced is not None
    assert built == [("1.2.3", environ)]

    with traced.round(1):
        pass
    assert exporter.get_finished_spans() == ()  # buffered
    traced.shutdown()

    [span] = exporter.get_finished_spans()
    assert span.instrumentation_scope is not None
    scope = span.instrumentation_scope
    assert (scope.name, scope.version) == ("stateway", "1.2.3")


def test_without_an_environment_given_the_process_s_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert open_tracing(ENABLED, "0") is None
    monkeypatch.delenv("OTEL_SDK_DISABLED")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    with pytest.raises(ConfigError, match="http/json"):
        check_tracing(ENABLED)


def test_an_environment_given_is_read_not_the_process_s(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    traced = open_tracing(ENABLED, "0", {})
    assert traced is not None
    traced.shutdown()
    tracing.otlp_provider("0", {}).shutdown()


def _missing(absent: str) -> Any:
    def import_module(name: str) -> object:
        if name == absent:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return object()

    return SimpleNamespace(import_module=import_module)


def test_the_http_exporter_missing_is_named_with_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracing, "importlib", _missing(HTTP_EXPORTER))

    with pytest.raises(ConfigError) as raised:
        check_tracing(ENABLED, {})

    assert str(raised.value) == (
        f"tracing.enabled needs the OpenTelemetry SDK and OTLP exporter ({HTTP_EXPORTER} is "
        "not installed): pip install 'stateway[otel]'"
    )


def test_the_sdk_missing_is_named_with_the_extra_under_grpc_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tracing, "importlib", _missing("opentelemetry.sdk.trace"))

    with pytest.raises(ConfigError, match=r"\(opentelemetry.sdk.trace is not installed\)"):
        check_tracing(ENABLED, {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})


def test_the_refusals_of_a_protocol_say_what_to_do_in_full() -> None:
    with pytest.raises(ConfigError) as grpc:
        check_tracing(ENABLED, {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    assert str(grpc.value) == (
        "tracing.enabled over grpc needs its OTLP exporter, which the otel extra leaves out: "
        "pip install opentelemetry-exporter-otlp-proto-grpc, or export over http/protobuf"
    )
    with pytest.raises(ConfigError) as unknown:
        check_tracing(ENABLED, {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"})
    assert str(unknown.value) == (
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL 'http/json': traces are exported over OTLP as "
        "http/protobuf (the default) or grpc"
    )
