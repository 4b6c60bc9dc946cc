"""What the core and the request observer report reaches the metrics, tracing on or off."""

from __future__ import annotations

from stateway.core.telemetry import RunReport
from stateway.core.usage import Usage
from stateway.telemetry.metrics import PrometheusMetrics
from stateway.telemetry.observability import Observability
from tests.telemetry.test_metrics import scrape


def test_every_report_reaches_the_metrics() -> None:
    telemetry = Observability(PrometheusMetrics())
    telemetry.tool_called("mcp", "timeout")
    telemetry.run_ended(RunReport("acme", "m", Usage(3, 2), [], None))
    telemetry.request_ended("/v1/responses", 200, 0.5)
    telemetry.request_refused(431)
    telemetry.websocket_opened()
    telemetry.websocket_opened()
    telemetry.websocket_closed()
    telemetry.shutdown()  # tracing off: nothing to flush
    samples = scrape(telemetry.metrics)
    assert samples["stateway_tool_calls_total"] == {(("outcome", "timeout"), ("tool", "mcp")): 1}
    assert samples["stateway_input_tokens_total"] == {(("model", "m"), ("tenant", "acme")): 3}
    assert samples["stateway_requests_total"] == {
        (("route", "/v1/responses"), ("status", "200")): 1,
        (("route", "unmatched"), ("status", "431")): 1,
    }
    assert samples["stateway_request_duration_seconds_sum"] == {(("route", "/v1/responses"),): 0.5}
    assert samples["stateway_websocket_connections"] == {(): 1}
