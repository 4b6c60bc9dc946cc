"""The coordination adapters a configuration asks for: in process, or through Redis.

Called by the composition root (:mod:`stateway.app`) only. The Redis adapters (and the
``redis`` package, ~9 MiB of a process) are imported only when a configuration names Redis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stateway.config import Config
from stateway.coordination.memory import MemoryCommandResults
from stateway.coordination_config import CoordinationConfig
from stateway.core.concurrency import MemoryRequestSlots, RequestSlots
from stateway.core.coordination import CancelSignals, CommandResults, EventFanout
from stateway.core.limits import RateLimits, TokenBuckets

if TYPE_CHECKING:
    from redis.asyncio import Redis


def build_coordination(config: CoordinationConfig) -> tuple[CommandResults, CancelSignals | None]:
    """Command outcomes in process, or both outcomes and cancel signals through Redis."""
    if config.redis_url is None:
        memory = MemoryCommandResults(
            config.max_results, config.result_ttl, max_bytes=config.max_result_bytes
        )
        return memory, None
    from stateway.coordination.redis import RedisCancelSignals, RedisCommandResults

    results = RedisCommandResults(
        _redis(config, config.redis_url),
        config.key_prefix,
        claim_ttl=config.claim_ttl,
        result_ttl=config.result_ttl,
        max_results=config.max_results,
        max_bytes=config.max_result_bytes,
    )
    return results, RedisCancelSignals(_redis(config, config.redis_url), config.key_prefix)


def build_fanout(config: CoordinationConfig) -> EventFanout | None:
    """Background runs' events published to other processes: through Redis only (a
    single process watches its own runs live)."""
    if config.redis_url is None:
        return None
    from stateway.coordination.event_fanout import RedisEventFanout

    return RedisEventFanout(_redis(config, config.redis_url), config.key_prefix)


def build_limits(config: Config) -> RateLimits | None:
    """The ``[rate_limits]`` buckets and concurrent request slots: in Redis when replicas
    share one, else in process."""
    limits = config.rate_limits
    concurrent = limits.concurrent_requests
    per_minute = (limits.requests_per_minute, limits.tokens_per_minute)
    if concurrent is None and per_minute == (None, None):
        return None
    from stateway.coordination.token_buckets import MemoryTokenBuckets, RedisTokenBuckets
    from stateway.coordination.token_buckets import log as limits_log

    coordination = config.coordination
    buckets: TokenBuckets = MemoryTokenBuckets()
    slots: RequestSlots | None = None if concurrent is None else MemoryRequestSlots()
    if coordination.redis_url is not None:
        from stateway.coordination.outage import RedisOutage

        client = _redis(coordination, coordination.redis_url)
        outage = RedisOutage(limits_log, "rate limits", client.ping)  # one for both
        buckets = RedisTokenBuckets(client, coordination.key_prefix, outage=outage)
        if concurrent is not None:
            from stateway.coordination.request_slots import RedisRequestSlots

            slots_client = _redis(coordination, coordination.redis_url)
            slots = RedisRequestSlots(slots_client, coordination.key_prefix, outage=outage)
    return RateLimits(
        buckets,
        limits.requests_per_minute,
        limits.tokens_per_minute,
        slots=slots,
        concurrent_requests=concurrent,
    )


def _redis(config: CoordinationConfig, url: str) -> Redis:
    """A client for the configured Redis at ``url`` (``config``'s, checked set), each
    command and connect bounded by ``redis_timeout``: every adapter's the same way."""
    from stateway.coordination.redis import connect

    return connect(url, timeout=config.redis_timeout)
