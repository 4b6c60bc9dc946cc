"""Prometheus metrics: what each observed event counts, and the text ``GET /metrics``
serves.

Every metric lives in this object's own registry (none in the client's global one).
Labels are bounded by the configuration, never by what a client sends: ``route`` is the
path template (``unmatched`` for a path no route serves, and for a request refused before
routing: :meth:`PrometheusMetrics.request_refused`), ``backend`` a configured
backend, ``tool`` a tool kind; ``model`` is the requested name of a run that produced
tokens, ``tenant`` the caller's tenant. A catch-all upstream serves any name a client
sends (one that accepts any, as llama.cpp's server does, answers them all), so the first
:data:`MAX_MODELS` names the configuration does not route get a ``model`` of their own and
later ones count as :data:`OTHER_MODEL`: each name held label children for good (~3 KB,
and ~24 lines of every scrape). The names it routes (:meth:`PrometheusMetrics.name_models`:
backends' models, routes, aliases) always have their own, bounded by the configuration, so
a client making up names cannot take their labels. What a request or a run updates is
counted on the event loop's thread in plain numbers (:mod:`.loop_metrics`), its label
children cached by label values, so a request costs two dictionary lookups, one increment
and one observation. Gauges that are a state of the process (runs in flight, requests
queued for an upstream connection) are read when scraped, at no cost per request.

=====================================================  =========  ==================
name                                                   type       labels
=====================================================  =========  ==================
``stateway_requests_total``                            counter    route, status
``stateway_request_duration_seconds``                  histogram  route
``stateway_time_to_first_token_seconds``               histogram  model
``stateway_input_tokens_total``                        counter    model, tenant
``stateway_output_tokens_total``                       counter    model, tenant
``stateway_upstream_attempts_total``                   counter    backend, outcome
``stateway_tool_calls_total``                          counter    tool, outcome
``stateway_active_runs``                               gauge
``stateway_upstream_queue_depth``                      gauge
``stateway_websocket_connections``                     gauge
``stateway_storage_duration_seconds``                  histogram  operation
``stateway_responses_deleted_total``                   counter
``stateway_conversations_purged_total``                counter
``stateway_responses_erased_total``                    counter
``stateway_config_generation``                         gauge
``stateway_config_last_reload_successful``             gauge
``stateway_config_restart_required``                   gauge
=====================================================  =========  ==================

The configuration's gauges say what ``GET /admin/config/status`` says, for a process
whose admin routes are not served (no admin credential) or that is reloaded by
``SIGHUP``, which answers nothing: a reload that failed, start-up settings changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

from stateway.core.generations import ConfigStatus
from stateway.core.telemetry import RunReport, ToolOutcome
from stateway.telemetry.loop_metrics import Count, LoopCounter, LoopHistogram, Observed

LATENCY_BUCKETS: Final = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0
)  # fmt: skip
"""Seconds: a first token of a model call comes in milliseconds to minutes (a queue, a
long prompt's prefill)."""
REQUEST_BUCKETS: Final = (*LATENCY_BUCKETS, 1800.0, 3600.0, 7200.0)
"""Seconds: a request's answer ends in milliseconds to hours (a stream of an agent's run
of many rounds, a watcher following a background run to its end)."""
STORAGE_BUCKETS: Final = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0
)  # fmt: skip
UNMATCHED: Final = "unmatched"
"""The ``route`` of a request no route serves (a 404 for an unknown path), or answered
before any route was looked up (the header guard's 431, uvicorn's 400)."""
MAX_MODELS: Final = 256
"""Distinct ``model`` label values of names the configuration does not route; names past
them count as :data:`OTHER_MODEL`."""
OTHER_MODEL: Final = "(other)"
"""The ``model`` of runs for names past :data:`MAX_MODELS` (not a name a route can have)."""


class PrometheusMetrics:
    def __init__(self, *, max_models: int = MAX_MODELS) -> None:
        # No ``_created`` series beside each counter and histogram: one more per label set
        # that no dashboard reads. The switch is the library's, for the whole process.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry()
        registry = self.registry
        # What every request updates is counted on the event loop's thread (loop_metrics).
        self._requests = LoopCounter(
            "stateway_requests",
            "HTTP requests answered, by route template and status code.",
            ["route", "status"],
            registry,
        )
        self._duration = LoopHistogram(
            "stateway_request_duration_seconds",
            "Time from a request's arrival to the end of its answer (a stream's last byte).",
            ["route"],
            REQUEST_BUCKETS,
            registry,
        )
        self._first_token = LoopHistogram(
            "stateway_time_to_first_token_seconds",
            "Time from a run's admission to its first output from the model.",
            ["model"],
            LATENCY_BUCKETS,
            registry,
        )
        self._input_tokens = LoopCounter(
            "stateway_input_tokens",
            "Input tokens used (the responses' usage), by requested model and tenant.",
            ["model", "tenant"],
            registry,
        )
        self._output_tokens = LoopCounter(
            "stateway_output_tokens",
            "Output tokens used (the responses' usage), by requested model and tenant.",
            ["model", "tenant"],
            registry,
        )
        self._attempts = LoopCounter(
            "stateway_upstream_attempts",
            "Upstream attempts by backend and outcome (ok, failed, cut, cancelled, skipped).",
            ["backend", "outcome"],
            registry,
        )
        self._tool_calls = Counter(
            "stateway_tool_calls",
            "Gateway tool calls by kind and outcome (ok, error, timeout, cancelled).",
            ["tool", "outcome"],
            registry=registry,
        )
        self._websockets = Gauge(
            "stateway_websocket_connections",
            "WebSocket connections open.",
            registry=registry,
        )
        self._storage = Histogram(
            "stateway_storage_duration_seconds",
            "Time the response store took, by operation.",
            ["operation"],
            buckets=STORAGE_BUCKETS,
            registry=registry,
        )
        self._active_runs = Gauge(
            "stateway_active_runs", "Runs in flight in this process.", registry=registry
        )
        self._queued = Gauge(
            "stateway_upstream_queue_depth",
            "Upstream calls waiting for a connection slot (the admission waiting room).",
            registry=registry,
        )
        self._responses_deleted = Counter(
            "stateway_responses_deleted",
            "Stored responses deleted by retention sweeps ([storage] retention).",
            registry=registry,
        )
        self._conversations_purged = Counter(
            "stateway_conversations_purged",
            "Deleted conversations erased for good, with their items, by sweeps.",
            registry=registry,
        )
        self._responses_erased = Counter(
            "stateway_responses_erased",
            "Deleted responses whose content (items, event log, body text) sweeps erased.",
            registry=registry,
        )
        self._generation = Gauge(
            "stateway_config_generation",
            "The configuration generation in effect (+1 per successful reload).",
            registry=registry,
        )
        self._reloaded = Gauge(
            "stateway_config_last_reload_successful",
            "1 unless the last configuration reload failed (the generation before serves on).",
            registry=registry,
        )
        self._restart_required = Gauge(
            "stateway_config_restart_required",
            "Start-up settings the configuration changed since start-up: not applied "
            "until a restart.",
            registry=registry,
        )
        self._per_request: dict[tuple[str, int], tuple[Count, Observed]] = {}
        self._per_operation: dict[str, Histogram] = {}
        # Label children looked up once per label values (the families keep them anyway).
        self._per_tenant: dict[tuple[str, str], tuple[Count, Count]] = {}
        self._per_model: dict[str, Observed] = {}
        self._per_attempt: dict[tuple[str, str], Count] = {}
        self._models: set[str] = set()
        """The names with a ``model`` label of their own: those the configuration routes,
        and at most ``max_models`` others."""
        self._unrouted = 0
        """How many of them the configuration does not route (clients chose them)."""
        self._max_models = max_models

    def sample(self, active_runs: Callable[[], int], queued: Callable[[], int]) -> None:
        """Read the runs in flight and the queued calls from these when scraped."""
        self._active_runs.set_function(active_runs)
        self._queued.set_function(queued)

    def sample_config(self, status: Callable[[], ConfigStatus]) -> None:
        """Read the configuration's state from ``status`` when scraped."""
        self._generation.set_function(lambda: status().generation)
        self._reloaded.set_function(lambda: status().last_error is None)
        self._restart_required.set_function(lambda: len(status().restart_required))

    def request_ended(self, route: str, status: int, seconds: float) -> None:
        children = self._per_request.get((route, status))
        if children is None:
            children = (
                self._requests.labels(route, str(status)),
                self._duration.labels(route),
            )
            self._per_request[(route, status)] = children
        children[0].value += 1
        children[1].observe(seconds)

    def request_refused(self, status: int) -> None:
        """A request answered before any app ran (a 431 for its header block, a 400 for
        one that could not be parsed): counted under :data:`UNMATCHED`, not timed (its
        arrival is not known)."""
        self._requests.labels(UNMATCHED, str(status)).value += 1

    def websocket_opened(self) -> None:
        self._websockets.inc()

    def websocket_closed(self) -> None:
        self._websockets.dec()

    def run_ended(self, report: RunReport) -> None:
        usage = report.usage
        if usage is not None and not (usage.input_tokens or usage.output_tokens):
            usage = None  # no tokens: no series
        model = report.model
        if usage is not None or report.first_output is not None:
            model = self._model_label(model)  # a name takes a label only with a series
        if usage is not None:
            key = (model, report.tenant_id)
            tokens = self._per_tenant.get(key)
            if tokens is None:
                tokens = self._per_tenant[key] = (
                    self._input_tokens.labels(*key),
                    self._output_tokens.labels(*key),
                )
            tokens[0].value += usage.input_tokens
            tokens[1].value += usage.output_tokens
        for attempt in report.attempts:
            outcome = (attempt["backend"], attempt["outcome"])
            counter = self._per_attempt.get(outcome)
            if counter is None:
                counter = self._per_attempt[outcome] = self._attempts.labels(*outcome)
            counter.value += 1
        if report.first_output is not None:
            first = self._per_model.get(model)
            if first is None:
                first = self._per_model[model] = self._first_token.labels(model)
            first.observe(report.first_output)

    def name_models(self, names: Iterable[str]) -> None:
        """The model names a configuration routes (each generation's): each has a
        ``model`` label of its own, outside the bound."""
        self._models.update(names)

    def _model_label(self, model: str) -> str:
        models = self._models
        if model in models:
            return model
        if self._unrouted < self._max_models:
            self._unrouted += 1
            models.add(model)
            return model
        return OTHER_MODEL

    def tool_called(self, tool: str, outcome: ToolOutcome) -> None:
        self._tool_calls.labels(tool, outcome).inc()

    def storage_observed(self, operation: str, seconds: float) -> None:
        child = self._per_operation.get(operation)
        if child is None:
            child = self._per_operation[operation] = self._storage.labels(operation)
        child.observe(seconds)

    def responses_deleted(self, count: int) -> None:
        """A retention sweep deleted ``count`` stored responses."""
        self._responses_deleted.inc(count)

    def conversations_purged(self, count: int) -> None:
        """A sweep erased ``count`` deleted conversations."""
        self._conversations_purged.inc(count)

    def responses_erased(self, count: int) -> None:
        """A sweep erased the content of ``count`` deleted responses."""
        self._responses_erased.inc(count)

    def exposition(self) -> tuple[bytes, str]:
        """The text format and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
