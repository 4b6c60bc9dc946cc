"""Metrics and traces behind the two ports that report them: the core's
:class:`~stateway.core.telemetry.Telemetry` and the HTTP surface's
:class:`~stateway.surfaces.http.observed.RequestObserver`.

Metrics are always kept; spans only when tracing is on (otherwise every span of the core
is a shared no-op object, returned before anything about the span is read or built, so
the core's ``with`` blocks cost next to nothing, and a request opens none).
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager

from stateway.core.backend import Backend
from stateway.core.inference import InferenceRequest
from stateway.core.telemetry import (
    NO_SPAN,
    AttemptSpan,
    RunReport,
    Span,
    ToolCall,
    ToolOutcome,
)
from stateway.surfaces.http.observed import RequestSpan
from stateway.telemetry.metrics import PrometheusMetrics
from stateway.telemetry.tracing import Tracing


class Observability:
    def __init__(self, metrics: PrometheusMetrics, tracing: Tracing | None = None) -> None:
        self.metrics = metrics
        self.tracing = tracing

    # -- the core's Telemetry --------------------------------------------------------

    def round(self, number: int) -> AbstractContextManager[Span]:
        if self.tracing is None:
            return NO_SPAN
        return self.tracing.round(number)

    def attempt(
        self, backend: Backend, request: InferenceRequest
    ) -> AbstractContextManager[AttemptSpan]:
        if self.tracing is None:
            return NO_SPAN
        return self.tracing.attempt(backend, request)

    def tool_call(self, call: ToolCall) -> AbstractContextManager[Span]:
        if self.tracing is None:
            return NO_SPAN
        return self.tracing.tool_call(call)

    def tool_called(self, tool: str, outcome: ToolOutcome) -> None:
        self.metrics.tool_called(tool, outcome)

    def run_ended(self, report: RunReport) -> None:
        self.metrics.run_ended(report)

    # -- the HTTP surface's RequestObserver ------------------------------------------

    def request_span(
        self, method: str, request_id: str, headers: Iterable[tuple[bytes, bytes]]
    ) -> AbstractContextManager[RequestSpan] | None:
        if self.tracing is None:
            return None
        return self.tracing.request_span(method, request_id, headers)

    def request_ended(self, route: str, status: int, seconds: float) -> None:
        self.metrics.request_ended(route, status, seconds)

    def request_refused(self, status: int) -> None:
        """The header guard's refusals (:class:`~stateway.header_guard.RefusedRequests`)."""
        self.metrics.request_refused(status)

    def websocket_opened(self) -> None:
        self.metrics.websocket_opened()

    def websocket_closed(self) -> None:
        self.metrics.websocket_closed()

    def shutdown(self) -> None:
        """Flush and stop the trace exporter."""
        if self.tracing is not None:
            self.tracing.shutdown()
