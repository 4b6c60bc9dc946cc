"""The configuration's ``[storage]`` table: where responses are kept, how long to wait
for that database, how many connections to hold, and how long stored responses are kept.
Environment: ``STATEWAY_DATABASE`` (also the ``--database`` flag, read with the other
flags in :mod:`stateway.config`), ``STATEWAY_DATABASE_TIMEOUT``,
``STATEWAY_DATABASE_MAX_CONNECTIONS``, ``STATEWAY_RETENTION``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pydantic import Field, field_validator

from stateway.config_section import Section
from stateway.durations import EXAMPLES, duration_seconds
from stateway.storage.sql.engine import MAX_CONNECTIONS, async_url

STORAGE_ENV: Final = {
    "database_timeout": "STATEWAY_DATABASE_TIMEOUT",
    "max_connections": "STATEWAY_DATABASE_MAX_CONNECTIONS",
    "retention": "STATEWAY_RETENTION",
}
"""The ``[storage]`` setting each environment variable sets."""


class StorageConfig(Section):
    database: str | None = None
    """``sqlite:///path.db`` or ``postgresql://user@host/db``; default: a SQLite file in the
    user's data directory."""
    database_timeout: float = Field(default=30.0, gt=0)
    """PostgreSQL: seconds a statement waits for the database's answer. One that stops
    answering without closing (a network partition, a frozen host) fails the statement
    after it, cancelled (a request's 503; a run ends failed, "could not be stored"),
    rather than holding it; opening a connection waits 10 s at most, or this when
    shorter. A statement finding every connection taken waits this long for one: on
    SQLite that is all this bounds (its statements wait for locks 5 s, its busy
    timeout)."""
    max_connections: int = Field(default=MAX_CONNECTIONS, ge=1)
    """PostgreSQL: connections a gateway process holds at most (10 kept open, the rest
    opened when needed). Each replica holds its own, against the server's own
    ``max_connections`` (100 by default): keep replicas x this below it, with room for
    migrations and other clients. Not applicable to SQLite."""

    retention: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Seconds a stored response is kept after it was created (``"30d"``, ``"12h"``, or a
    number of seconds); older finished ones are deleted with their items and event logs
    (:mod:`stateway.core.retention`). Default: kept until deleted (hosted OpenAI keeps
    them 30 days). Conversations and their items are not affected."""

    @field_validator("retention", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        if isinstance(value, str):
            seconds = duration_seconds(value)
            if seconds is None:
                try:
                    return float(value)
                except ValueError:
                    raise ValueError(f"expected a duration ({EXAMPLES}) or seconds") from None
            return seconds
        return value

    @field_validator("database")
    @classmethod
    def _usable_url(cls, url: str | None) -> str | None:
        if url is not None:
            async_url(url)  # its ValueError says what is wrong, for a human
        return url


def apply_storage_env(data: dict[str, Any], env: Mapping[str, str]) -> None:
    """Set ``[storage] database_timeout``, ``max_connections`` and ``retention`` from the
    environment (over the file's) in ``data``, the file's tables."""
    for key, variable in STORAGE_ENV.items():
        if env.get(variable):
            data["storage"] = {**data.get("storage", {}), key: env[variable]}
