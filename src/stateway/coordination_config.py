"""The configuration's ``[coordination]`` and ``[rate_limits]`` tables: what gateway
processes share beyond the database (Redis), and the limits per principal they enforce
together. Environment: ``STATEWAY_REDIS_URL``, ``STATEWAY_REDIS_KEY_PREFIX``,
``STATEWAY_REDIS_TIMEOUT``, ``STATEWAY_LEASE_TIMEOUT``, ``STATEWAY_REQUESTS_PER_MINUTE``,
``STATEWAY_TOKENS_PER_MINUTE``, ``STATEWAY_CONCURRENT_REQUESTS``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from stateway.config_section import Section

_REDIS_DATABASE = re.compile(r"(?:/\d*)?")
"""The path of a ``redis://`` URL: none, ``/``, or ``/`` and the database's number."""


class CoordinationConfig(Section):
    """What gateway processes share beyond the database (``core/coordination.py``)."""

    redis_url: str | None = None
    """``redis://host:port/db``: shared through Redis by every process given the same URL
    and ``key_prefix``: command ids' claims and outcomes, cancel signals, background runs'
    event batches (followed live by another process's watchers) and the ``[rate_limits]``
    token buckets and concurrent request slots. Default: in process (outcomes, buckets
    and slots kept per process)."""
    key_prefix: str = Field(default="stateway:", min_length=1)
    """Prefix of every Redis key and channel (several gateways can share one Redis)."""
    redis_timeout: float = Field(default=5.0, gt=0)
    """Seconds a Redis command, or opening a connection, waits for Redis: one that stops
    answering without closing (a network partition, a frozen host) fails the command
    after it (a keyed request's 503; rate limits let requests through) rather than
    holding it. Subscriptions wait on, pinging a quiet connection every 5 s."""
    max_results: int = Field(default=10_000, ge=1)
    """Command outcomes remembered: in process, in all (beyond, the least recently used
    of the tenant holding the most is dropped first); in Redis, per tenant (beyond, the
    tenant's oldest is dropped first)."""
    max_result_bytes: int = Field(default=256 * 1024 * 1024, ge=1)
    """Bytes of answers the remembered outcomes hold: in process, in all (beyond, the
    least recently used of the tenant holding the most bytes is dropped first, as past
    ``max_results``); in Redis, per tenant (beyond, the tenant's oldest is dropped first).
    The newest is kept whatever its size."""
    result_ttl: float = Field(default=24 * 3600.0, gt=0)
    """Seconds a command's outcome is remembered (retries within it get the same answer)."""
    claim_ttl: float = Field(default=30.0, gt=0)
    """Redis: seconds a claim outlives a process that died while running its command
    (the claim is renewed every third of it while the command runs): a retry elsewhere
    waits that long, not for the process's lease (ADR 0011). Shorter, a holder paused
    longer than it may run its command beside the retry's."""
    lease_timeout: float = Field(default=10.0, gt=0)
    """Seconds a process may go without renewing its lease (it renews every third of
    this) before another process sharing the database fails its runs (server_restarted)."""

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, url: str | None) -> str | None:
        """Parsed as serving's client parses it (else a port out of range is a traceback
        as serving starts), and its database a number: redis-py reads ``/x`` as database
        0 and ``/1/2`` as 12, silently. Neither message shows the URL (its password)."""
        if url is None:
            return None
        if not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must start with redis://, rediss:// or unix://")
        from redis.connection import parse_url  # only when set: redis takes a while to import

        try:
            parse_url(url)  # type: ignore[no-untyped-call]
        except ValueError as exc:
            raise ValueError(str(exc)) from None
        if not url.startswith("unix://") and not _REDIS_DATABASE.fullmatch(urlsplit(url).path):
            raise ValueError(
                "the database, the URL's path, must be a number (redis://host:6379/0) "
                "or left out (0)"
            )
        return url


class RateLimitsConfig(Section):
    """Limits per principal (an API key, or the tenant's one subject until keys exist),
    shared by every replica through Redis (``[coordination] redis_url``)."""

    requests_per_minute: int | None = Field(default=None, ge=1)
    """Model requests a minute (a token bucket of this size); default: unlimited."""
    tokens_per_minute: int | None = Field(default=None, ge=1)
    """Input and output tokens a minute, counted when each run ends; default: unlimited."""
    concurrent_requests: int | None = Field(default=None, ge=1)
    """Model requests in flight at once (a run until it ends, background ones included;
    a relayed answer until it is relayed); default: unlimited."""


COORDINATION_ENV = {
    "redis_url": "STATEWAY_REDIS_URL",
    "key_prefix": "STATEWAY_REDIS_KEY_PREFIX",
    "redis_timeout": "STATEWAY_REDIS_TIMEOUT",
    "lease_timeout": "STATEWAY_LEASE_TIMEOUT",
}
"""``[coordination]`` keys settable from the environment."""

RATE_LIMITS_ENV = {
    "requests_per_minute": "STATEWAY_REQUESTS_PER_MINUTE",
    "tokens_per_minute": "STATEWAY_TOKENS_PER_MINUTE",
    "concurrent_requests": "STATEWAY_CONCURRENT_REQUESTS",
}
"""``[rate_limits]`` keys settable from the environment."""


def apply_coordination_env(data: dict[str, Any], env: Mapping[str, str]) -> None:
    """Set the ``[coordination]`` and ``[rate_limits]`` keys the environment gives (over
    the file's) in ``data``, the file's tables."""
    for table, variables in (
        ("coordination", COORDINATION_ENV),
        ("rate_limits", RATE_LIMITS_ENV),
    ):
        for key, var in variables.items():
            if env.get(var):
                data[table] = {**data.get(table, {}), key: env[var]}
