"""The Telemetry port: what the core tells whoever observes it.

The core knows nothing of Prometheus or OpenTelemetry. It calls a :class:`Telemetry`
(``app/gateway.py`` builds one from :mod:`stateway.telemetry`) at points that come once per run,
round, upstream attempt or tool call, never per streamed delta:

- :meth:`Telemetry.span` wraps a round (:data:`ROUND`), an upstream attempt
  (:data:`ATTEMPT`) and a gateway tool call (:data:`TOOL_CALL`). With tracing on they
  nest under the span of the request that started the run (a run's task inherits the
  request's context); otherwise they cost a shared no-op object.
- :meth:`Telemetry.tool_called` counts a gateway tool call by kind and outcome.
- :meth:`Telemetry.run_ended` hands over what a run (or a relayed Chat Completions
  answer) used: its tokens, its upstream attempts, its time to first output.

:data:`REQUEST_ID` is the id of the HTTP request being served, set by the surface; a
run's task inherits it, so log lines written for the run carry it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol

from stateway.core.usage import Usage

REQUEST_ID: Final[ContextVar[str | None]] = ContextVar("stateway_request_id", default=None)
"""The id of the request being served (``x-request-id``); None outside a request."""

ROUND: Final = "stateway.round"
ATTEMPT: Final = "stateway.attempt"
TOOL_CALL: Final = "stateway.tool_call"

Attribute = str | int | float | bool
ToolOutcome = Literal["ok", "error", "timeout", "cancelled"]


class Span(Protocol):
    def set(self, key: str, value: Attribute) -> None:
        """Add an attribute (dropped unless the tracer allows its key)."""
        ...


@dataclass(frozen=True, slots=True)
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
    def span(self, name: str, attributes: Mapping[str, Attribute]) -> AbstractContextManager[Span]:
        """A span around the block, a child of the current one (an exception leaving
        the block marks it failed)."""
        ...

    def tool_called(self, tool: str, outcome: ToolOutcome) -> None:
        """A gateway tool call ended: ``tool`` is its kind (``mcp``, ``mcp_list_tools``,
        ``web_search``, ``tool_search``)."""
        ...

    def run_ended(self, report: RunReport) -> None: ...


class NoTelemetry:
    """Observes nothing: the default where nothing is wired (unit tests)."""

    def span(self, name: str, attributes: Mapping[str, Attribute]) -> AbstractContextManager[Span]:
        return NO_SPAN

    def tool_called(self, tool: str, outcome: ToolOutcome) -> None:
        pass

    def run_ended(self, report: RunReport) -> None:
        pass


class NoSpan:
    """A span that records nothing; stateless, so one serves every block."""

    def __enter__(self) -> NoSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def set(self, key: str, value: Attribute) -> None:
        pass


NO_SPAN: Final = NoSpan()
