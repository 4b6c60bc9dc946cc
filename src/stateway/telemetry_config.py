"""The configuration's ``[logging]`` and ``[tracing]`` tables (read at start-up only).

::

    [logging]
    format = "json"        # or "text" (the default); also STATEWAY_LOG_FORMAT
    level = "info"         # also STATEWAY_LOG_LEVEL

    [tracing]
    enabled = true         # also STATEWAY_TRACING; the exporter reads the OTEL_* variables

Metrics need no setting: ``GET /metrics`` is always served (see ``stateway.telemetry``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from stateway.config_section import Section


class LoggingConfig(Section):
    format: Literal["text", "json"] = "text"
    """``json``: one JSON object per line (time, level, logger, message, request_id)."""
    level: Literal["debug", "info", "warning", "error"] = "info"


class TracingConfig(Section):
    enabled: bool = False
    """Export OpenTelemetry traces over OTLP (needs the ``otel`` extra): endpoint,
    headers, protocol, sampler and resource from the standard ``OTEL_*`` variables."""


TELEMETRY_ENV: dict[str, tuple[str, str]] = {
    "STATEWAY_LOG_FORMAT": ("logging", "format"),
    "STATEWAY_LOG_LEVEL": ("logging", "level"),
    "STATEWAY_TRACING": ("tracing", "enabled"),
}
"""Variables over the file's values, with the table and key each sets."""


def apply_telemetry_env(data: dict[str, Any], env: Mapping[str, str]) -> None:
    """Set ``data``'s ``[logging]`` and ``[tracing]`` keys from the environment."""
    for var, (table, key) in TELEMETRY_ENV.items():
        if env.get(var):
            value = env[var].lower() if table == "logging" else env[var]
            data[table] = {**data.get(table, {}), key: value}
