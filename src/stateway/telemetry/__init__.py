"""Observability adapters: what the core's Telemetry port and the HTTP surface's request
observer report, turned into Prometheus metrics, OpenTelemetry traces and log lines.

:mod:`.metrics` (the Prometheus registry and ``/metrics``'s text), :mod:`.tracing` (spans
through the OpenTelemetry API; the OTLP exporter when ``[tracing] enabled``), :mod:`.genai`
(the GenAI semantic conventions on an attempt's and a tool call's spans),
:mod:`.observability` (both behind the core's and the surface's ports), :mod:`.storage`
(the response store, timed), :mod:`.logs` (text or JSON lines with the request id).
Nothing here is imported by the core; ``app/gateway.py`` wires it.
"""
