"""The Prometheus metrics: names, labels and values as scraped, from the events the core
and the surface report; process gauges read at scrape time."""

from __future__ import annotations

import re
import sys
import typing
from pathlib import Path
from types import FrameType

import prometheus_client
from prometheus_client.parser import text_string_to_metric_families

from stateway.core.generations import ConfigStatus
from stateway.core.telemetry import RunReport, ToolOutcome
from stateway.core.usage import Usage
from stateway.telemetry.metrics import PrometheusMetrics

README = Path(__file__).resolve().parents[2] / "README.md"
_METRIC_ROW = re.compile(r"^\| (`stateway_[^|]+) \| (\w+) \|([^|]*)\|", re.MULTILINE)


def scrape(metrics: PrometheusMetrics) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """``{sample name: {sorted labels: value}}``."""
    body, content_type = metrics.exposition()
    assert content_type.startswith("text/plain")
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            samples.setdefault(sample.name, {})[labels] = sample.value
    return samples


def test_requests_are_counted_by_route_and_status_and_timed_by_route() -> None:
    metrics = PrometheusMetrics()
    metrics.request_ended("/v1/responses", 200, 0.2)
    metrics.request_ended("/v1/responses", 200, 0.3)
    metrics.request_ended("/v1/responses", 400, 0.01)
    metrics.request_ended("unmatched", 404, 0.001)
    samples = scrape(metrics)
    assert samples["stateway_requests_total"] == {
        (("route", "/v1/responses"), ("status", "200")): 2,
        (("route", "/v1/responses"), ("status", "400")): 1,
        (("route", "unmatched"), ("status", "404")): 1,
    }
    counts = samples["stateway_request_duration_seconds_count"]
    assert counts == {(("route", "/v1/responses"),): 3, (("route", "unmatched"),): 1}
    sums = samples["stateway_request_duration_seconds_sum"]
    assert abs(sums[(("route", "/v1/responses"),)] - 0.51) < 1e-9


def test_long_streams_are_told_apart_up_to_hours() -> None:
    """An agent's streamed run, or a watcher following a background run to its end, lasts
    minutes to hours: buckets end at 2 hours, not at 10 minutes. A first token waits up to
    minutes (a queue, a long prompt's prefill), so that histogram's end at 10 minutes."""
    metrics = PrometheusMetrics()
    for seconds in (0.004, 900.0, 2400.0, 5400.0, 9000.0):
        metrics.request_ended("/v1/responses/{response_id}", 200, seconds)
    metrics.run_ended(RunReport("acme", "m", Usage(1, 1), [], 240.0))
    samples = scrape(metrics)
    route = ("route", "/v1/responses/{response_id}")
    durations = {
        le: count
        for labels, count in samples["stateway_request_duration_seconds_bucket"].items()
        for key, le in labels
        if key == "le" and route in labels
    }
    assert {le: durations[le] for le in ("0.005", "600.0", "1800.0", "3600.0", "7200.0")} == {
        "0.005": 1,
        "600.0": 1,
        "1800.0": 2,
        "3600.0": 3,
        "7200.0": 4,
    }
    assert durations["+Inf"] == 5
    first = {
        le
        for labels in samples["stateway_time_to_first_token_seconds_bucket"]
        for key, le in labels
        if key == "le"
    }
    assert max(first - {"+Inf"}, key=float) == "600.0"
    assert "300.0" in first


def test_a_run_counts_its_tokens_attempts_and_first_token() -> None:
    metrics = PrometheusMetrics()
    attempts = [
        {"backend": "a", "outcome": "skipped"},
        {"backend": "a", "outcome": "failed"},
        {"backend": "b", "outcome": "ok"},
    ]
    metrics.run_ended(RunReport("acme", "m", Usage(10, 4), attempts, 0.25))
    metrics.run_ended(RunReport("acme", "m", Usage(5, 1), [{"backend": "b", "outcome": "ok"}]))
    metrics.run_ended(RunReport("other", "m", None, []))  # no usage: no series
    samples = scrape(metrics)
    key = (("model", "m"), ("tenant", "acme"))
    assert samples["stateway_input_tokens_total"] == {key: 15}
    assert samples["stateway_output_tokens_total"] == {key: 5}
    assert samples["stateway_upstream_attempts_total"] == {
        (("backend", "a"), ("outcome", "skipped")): 1,
        (("backend", "a"), ("outcome", "failed")): 1,
        (("backend", "b"), ("outcome", "ok")): 2,
    }
    assert samples["stateway_time_to_first_token_seconds_count"] == {(("model", "m"),): 1}


def test_tools_sockets_and_storage() -> None:
    metrics = PrometheusMetrics()
    metrics.tool_called("mcp", "ok")
    metrics.tool_called("mcp", "timeout")
    metrics.tool_called("mcp", "ok")
    metrics.websocket_opened()
    metrics.websocket_opened()
    metrics.websocket_closed()
    metrics.storage_observed("save", 0.002)
    metrics.storage_observed("save", 0.004)
    samples = scrape(metrics)
    assert samples["stateway_tool_calls_total"] == {
        (("outcome", "ok"), ("tool", "mcp")): 2,
        (("outcome", "timeout"), ("tool", "mcp")): 1,
    }
    assert samples["stateway_websocket_connections"] == {(): 1}
    assert samples["stateway_storage_duration_seconds_count"] == {(("operation", "save"),): 2}


def test_the_tool_calls_help_names_every_outcome() -> None:
    body, _ = PrometheusMetrics().exposition()
    families = {family.name: family for family in text_string_to_metric_families(body.decode())}
    help_text = families["stateway_tool_calls"].documentation
    assert help_text.endswith(f"({', '.join(typing.get_args(ToolOutcome))}).")


def test_process_gauges_are_read_when_scraped() -> None:
    metrics = PrometheusMetrics()
    state = {"runs": 3, "queued": 0}
    metrics.sample(lambda: state["runs"], lambda: state["queued"])
    assert scrape(metrics)["stateway_active_runs"] == {(): 3}
    state.update(runs=1, queued=7)
    samples = scrape(metrics)
    assert samples["stateway_active_runs"] == {(): 1}
    assert samples["stateway_upstream_queue_depth"] == {(): 7}


def test_the_configurations_state_is_read_when_scraped() -> None:
    """A reload that failed, or that changed a start-up setting, shows in the metrics as
    in the admin status: the admin routes are served only with an admin credential, and
    a ``SIGHUP`` answers nothing."""
    metrics = PrometheusMetrics()
    state = ConfigStatus(1, 0.0, None, (), ())
    metrics.sample_config(lambda: state)
    samples = scrape(metrics)
    assert samples["stateway_config_generation"] == {(): 1}
    assert samples["stateway_config_last_reload_successful"] == {(): 1}
    assert samples["stateway_config_restart_required"] == {(): 0}
    state = ConfigStatus(3, 0.0, "invalid configuration", ("server.port", "auth.api_keys"), ())
    samples = scrape(metrics)
    assert samples["stateway_config_generation"] == {(): 3}
    assert samples["stateway_config_last_reload_successful"] == {(): 0}
    assert samples["stateway_config_restart_required"] == {(): 2}


def test_no_created_series_are_exposed() -> None:
    """The text format carries counters' and histograms' ``_created`` as series of their
    own: one more per label set, which no dashboard reads (vLLM drops them too)."""
    metrics = PrometheusMetrics()
    metrics.request_ended("/v1/responses", 200, 0.2)
    metrics.run_ended(
        RunReport("acme", "m", Usage(10, 4), [{"backend": "b", "outcome": "ok"}], 0.1)
    )
    metrics.tool_called("mcp", "ok")
    samples = scrape(metrics)
    assert "stateway_requests_total" in samples
    assert [name for name in samples if name.endswith("_created")] == []


def test_each_gateway_has_its_own_registry() -> None:
    first, second = PrometheusMetrics(), PrometheusMetrics()
    first.request_ended("/health", 200, 0.001)
    assert "stateway_requests_total" not in scrape(second)


def test_model_names_past_the_bound_count_as_other() -> None:
    """A catch-all upstream serves any name a client sends: each name held label children
    for good (~3 KB and ~24 scraped lines per name, without limit)."""
    from stateway.telemetry.metrics import OTHER_MODEL

    metrics = PrometheusMetrics(max_models=3)
    metrics.run_ended(RunReport("acme", "failed", None, []))  # no series: takes no label
    for n in range(50):
        metrics.run_ended(RunReport("acme", f"model-{n}", Usage(2, 1), [], 0.5))
    metrics.run_ended(RunReport("acme", "model-1", Usage(1, 1), [], 0.5))  # keeps its own
    samples = scrape(metrics)
    counts = samples["stateway_time_to_first_token_seconds_count"]
    assert counts == {
        (("model", "model-0"),): 1,
        (("model", "model-1"),): 2,
        (("model", "model-2"),): 1,
        (("model", OTHER_MODEL),): 47,
    }
    tokens = samples["stateway_input_tokens_total"]
    assert tokens[(("model", OTHER_MODEL), ("tenant", "acme"))] == 94
    assert len(tokens) == 4


def test_configured_names_keep_their_label_once_made_up_names_used_the_bound() -> None:
    """A client making up names must not take the labels of the models the configuration
    routes: those are bounded by the configuration, and always have their own."""
    from stateway.telemetry.metrics import OTHER_MODEL

    metrics = PrometheusMetrics(max_models=2)
    metrics.name_models(["qwen3", "fast"])
    for n in range(10):
        metrics.run_ended(RunReport("acme", f"made-up-{n}", Usage(2, 1), [], 0.5))
    metrics.name_models(["added-by-a-reload"])
    for name in ("qwen3", "fast", "added-by-a-reload"):
        metrics.run_ended(RunReport("acme", name, Usage(1, 1), [], 0.5))
    counts = scrape(metrics)["stateway_time_to_first_token_seconds_count"]
    assert counts == {
        (("model", "made-up-0"),): 1,
        (("model", "made-up-1"),): 1,
        (("model", OTHER_MODEL),): 8,
        (("model", "qwen3"),): 1,
        (("model", "fast"),): 1,
        (("model", "added-by-a-reload"),): 1,
    }


def test_a_request_and_its_run_are_counted_without_the_librarys_locks() -> None:
    """What every request updates is kept on the event loop's thread in plain numbers
    (:mod:`stateway.telemetry.loop_metrics`): prometheus_client's thread-safe metrics
    took a lock and four to six Python calls per update, 1.6% of a plain request's CPU
    instructions."""
    metrics = PrometheusMetrics()
    report = RunReport("acme", "m", Usage(10, 4), [{"backend": "b", "outcome": "ok"}], 0.1)
    metrics.request_ended("/v1/responses", 200, 0.2)  # each label set's first: made now
    metrics.run_ended(report)
    library = str(Path(prometheus_client.__file__).parent)
    called: list[str] = []

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(library):
            called.append(frame.f_code.co_qualname)

    sys.setprofile(profile)
    try:
        metrics.request_ended("/v1/responses", 200, 0.3)
        metrics.run_ended(report)
    finally:
        sys.setprofile(None)
    assert called == []
    samples = scrape(metrics)
    assert samples["stateway_requests_total"] == {
        (("route", "/v1/responses"), ("status", "200")): 2
    }
    assert samples["stateway_input_tokens_total"] == {(("model", "m"), ("tenant", "acme")): 20}


def test_responses_erased_are_counted() -> None:
    metrics = PrometheusMetrics()
    metrics.responses_erased(3)
    metrics.responses_erased(2)
    assert b"stateway_responses_erased_total 5.0" in metrics.exposition()[0]


def test_every_metric_is_exposed_as_the_readme_documents() -> None:
    """The names, types and labels are a contract with users' dashboards: README's table
    ("Observability") lists each metric ``GET /metrics`` exposes, and nothing else."""
    documented: dict[str, tuple[str, list[str]]] = {}
    for names, kind, labels in _METRIC_ROW.findall(README.read_text(encoding="utf-8")):
        for name in re.findall(r"`(\w+)`", names):
            documented[name] = (kind, sorted(re.findall(r"`(\w+)`", labels)))
    metrics = PrometheusMetrics()  # each metric given a series
    metrics.request_ended("/v1/responses", 200, 0.2)
    metrics.run_ended(
        RunReport("acme", "m", Usage(10, 4), [{"backend": "b", "outcome": "ok"}], 0.1)
    )
    metrics.tool_called("mcp", "ok")
    metrics.storage_observed("save", 0.001)
    metrics.sample(lambda: 0, lambda: 0)
    metrics.sample_config(lambda: ConfigStatus(1, 0.0, None, (), ()))
    metrics.responses_deleted(1)
    metrics.conversations_purged(1)
    metrics.responses_erased(1)
    exposed: dict[str, tuple[str, list[str]]] = {}
    for family in text_string_to_metric_families(metrics.exposition()[0].decode()):
        name = f"{family.name}_total" if family.type == "counter" else family.name
        labels = {label for sample in family.samples for label in sample.labels}
        exposed[name] = (family.type, sorted(labels - {"le"}))
    assert len(documented) == 17
    assert exposed == documented


def test_sweeps_are_counted() -> None:
    metrics = PrometheusMetrics()
    metrics.responses_deleted(3)
    metrics.responses_deleted(2)
    metrics.conversations_purged(4)
    samples = scrape(metrics)
    assert samples["stateway_responses_deleted_total"] == {(): 5}
    assert samples["stateway_conversations_purged_total"] == {(): 4}
