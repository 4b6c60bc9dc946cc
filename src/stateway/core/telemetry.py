"""The Telemetry port: what the core tells whoever observes it.

The core knows nothing of Prometheus or OpenTelemetry. It calls a :class:`Telemetry`
(``app/gateway.py`` builds one from :mod:`stateway.telemetry`) at points that come once per run,
round, upstream attempt or tool call, never per streamed delta:

- :meth:`Telemetry.round`, :meth:`Telemetry.attempt` and :meth:`Telemetry.tool_call` wrap
  a round, an upstream attempt and a gateway tool call in a span. With tracing on they
  nest under the span of the request that started the run (a run's task inherits the
  request's context); otherwise each is a shared no-op object, built from nothing: what
  a span would show is read from the objects it is given only when it records
  (:attr:`Span.recording`), and the core computes what it tells a span after its block
  (:meth:`AttemptSpan.answered`) only then.
- :meth:`Telemetry.tool_called` counts a gateway tool call by kind and outcome.
- :meth:`Telemetry.run_ended` hands over what a run (or a relayed Chat Completions
  answer) used: its tokens, its upstream attempts, its time to first output.

:data:`REQUEST_ID` is the id of the HTTP request being served, set by the surface; a
run's task inherits it, so log lines written for the run carry it. :data:`TRACE_HEADERS`
is the trace context an upstream call sends (tracing on), set the same way by each span.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from contextvars import ContextVar
from typing import Any, Final, Literal, Protocol

from stateway.core.backend import Backend
from stateway.core.immutable import immutable
from stateway.core.inference import Answered, InferenceRequest
from stateway.core.usage import Usage

REQUEST_ID: Final[ContextVar[str | None]] = ContextVar("stateway_request_id", default=None)
"""The id of the request being served (``x-request-id``); None outside a request."""

TRACE_HEADERS: Final[ContextVar[Mapping[str, str] | None]] = ContextVar(
    "stateway_trace_headers", default=None
)
"""The W3C trace context (``traceparent``, and ``tracestate`` if any) of the innermost span
open, set by the tracing adapter while tracing is on; the backends send it with each
upstream call made under the span. None with tracing off: nothing is sent."""

Attribute = str | int | float | bool
ToolOutcome = Literal["ok", "error", "timeout", "cancelled"]


class Span(Protocol):
    recording: bool
    """Whether the span keeps what it is told: False for the no-op span (tracing off) and
    for a span the sampler dropped. Values computed only for a span are computed only
    when it is True."""

    def set(self, key: str, value: Attribute) -> None:
        """Add an attribute (dropped unless the tracer allows its key)."""
        ...

    def failed(self, error_type: str) -> None:
        """The operation ended in an error it handled (a tool call's timeout or error,
        answered to the model): marked failed, ``error_type`` its ``error.type``. An
        exception leaving the span's block marks it without this."""
        ...


class AttemptSpan(Span, Protocol):
    def answered(self, reason: str, usage: Usage | None, noted: Answered | None) -> None:
        """The attempt's answer ended: its finish reason, the tokens the upstream reported
        (None: it reported none) and what the backend noted of the answer (its id and
        model: :attr:`~.inference.InferenceRequest.answered`)."""
        ...


class ToolCall(Protocol):
    """A gateway tool call as a span shows it (:class:`~.tools.executor.Call`)."""

    @property
    def kind(self) -> str:
        """``mcp``, ``mcp_list_tools``, ``web_search`` or ``tool_search``."""
        ...

    @property
    def label(self) -> str:
        """How logs name the call (an MCP tool as ``server.tool``)."""
        ...

    @property
    def name(self) -> str:
        """An MCP tool's name on its server; empty for the gateway's own tools (their
        :attr:`kind` names them)."""
        ...

    @property
    def call_id(self) -> str | None:
        """The id of the call's item in the response's output, if it has one."""
        ...


@immutable
class RunReport:
    """What one run (or one relayed answer) used, told once it has ended."""

    tenant_id: str
    model: str
    """The model name the client asked for (an alias stays an alias)."""
    usage: Usage | None
    attempts: Sequence[Mapping[str, Any]] = ()
    """Its upstream attempts as recorded (:mod:`.routing.attempts`: ``backend`` and
    ``outcome`` at least), skipped candidates included."""
    first_output: float | None = None
    """Seconds from its routing plan (the request admitted, its context read) to its first
    output delta; None when no output came."""


class Telemetry(Protocol):
    """Each span is a child of the current one; an exception leaving its block marks it
    failed."""

    def round(self, number: int) -> AbstractContextManager[Span]:
        """A span around a run's round ``number`` (from 1)."""
        ...

    def attempt(
        self, backend: Backend, request: InferenceRequest
    ) -> AbstractContextManager[AttemptSpan]:
        """A span around one upstream attempt: ``request`` sent to ``backend``."""
        ...

    def tool_call(self, call: ToolCall) -> AbstractContextManager[Span]:
        """A span around one gateway tool call."""
        ...

    def tool_called(self, tool: str, outcome: ToolOutcome) -> None:
        """A gateway tool call ended: ``tool`` is its kind (``mcp``, ``mcp_list_tools``,
        ``web_search``, ``tool_search``; ``withheld``: a call of a tool the stages withheld,
        answered as not available)."""
        ...

    def run_ended(self, report: RunReport) -> None: ...


class NoTelemetry:
    """Observes nothing: the default where nothing is wired (unit tests)."""

    def round(self, number: int) -> AbstractContextManager[Span]:
        return NO_SPAN

    def attempt(
        self, backend: Backend, request: InferenceRequest
    ) -> AbstractContextManager[AttemptSpan]:
        return NO_SPAN

    def tool_call(self, call: ToolCall) -> AbstractContextManager[Span]:
        return NO_SPAN

    def tool_called(self, tool: str, outcome: ToolOutcome) -> None:
        pass

    def run_ended(self, report: RunReport) -> None:
        pass


class NoSpan:
    """A span that records nothing; stateless, so one serves every block."""

    recording = False

    def __enter__(self) -> NoSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def set(self, key: str, value: Attribute) -> None:
        pass

    def failed(self, error_type: str) -> None:
        pass

    def answered(self, reason: str, usage: Usage | None, noted: Answered | None) -> None:
        pass


NO_SPAN: Final = NoSpan()
