"""``[coordination]``: in process by default, Redis from the file or the environment."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from stateway.config import ConfigError, Overrides, load_config
from stateway.coordination import MemoryCommandResults
from stateway.coordination.event_fanout import RedisEventFanout
from stateway.coordination.factory import build_coordination, build_fanout, build_limits
from stateway.coordination.redis import RedisCancelSignals, RedisCommandResults
from stateway.coordination.request_slots import RedisRequestSlots
from stateway.coordination.token_buckets import MemoryTokenBuckets, RedisTokenBuckets
from stateway.core.concurrency import MemoryRequestSlots
from stateway.core.coordination import CommandKey, Outcome


def test_coordination_is_in_process_by_default() -> None:
    config = load_config(Overrides(), {})
    assert config.coordination.redis_url is None
    assert config.coordination.max_results == 10_000
    results, signals = build_coordination(config.coordination)
    assert isinstance(results, MemoryCommandResults)
    assert signals is None


async def test_in_process_outcomes_are_bounded_by_the_files_bytes(tmp_path: Path) -> None:
    assert load_config(Overrides(), {}).coordination.max_result_bytes == 256 * 1024 * 1024
    path = tmp_path / "c.toml"
    path.write_text("[coordination]\nmax_result_bytes = 100\n")
    results, _ = build_coordination(load_config(Overrides(config=str(path)), {}).coordination)
    keys = [CommandKey("t", "p", str(n)) for n in range(2)]
    for key in keys:
        assert await results.claim(key, "f") is None
        await results.complete(key, Outcome("f", b"x" * 60))
    assert await results.claim(keys[0], "f") is None  # dropped for the second's bytes
    assert await results.claim(keys[1], "f") == Outcome("f", b"x" * 60)


@pytest.mark.redis
async def test_redis_outcomes_are_bounded_per_tenant_by_the_files_numbers(
    tmp_path: Path, redis_url: str
) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        f'[coordination]\nredis_url = "{redis_url}"\nkey_prefix = "test:{uuid.uuid4().hex}:"\n'
        "max_results = 2\nmax_result_bytes = 100\n"
    )
    results, signals = build_coordination(load_config(Overrides(config=str(path)), {}).coordination)
    assert signals is not None
    try:
        keys = [CommandKey("t", "p", str(n)) for n in range(4)]
        for key in keys[:3]:
            assert await results.claim(key, "f") is None
            await results.complete(key, Outcome("f", b"x"))
        assert await results.claim(keys[0], "f") is None  # past max_results: runs again
        await results.complete(keys[0], Outcome("f", b"x" * 60))
        assert await results.claim(keys[3], "f") is None
        await results.complete(keys[3], Outcome("f", b"y" * 60))

        assert await results.claim(keys[3], "f") == Outcome("f", b"y" * 60)
        assert await results.claim(keys[0], "f") is None  # past max_result_bytes
        await results.release(keys[0])
    finally:
        await results.aclose()
        await signals.aclose()


async def test_redis_is_named_by_the_file_or_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[coordination]\nredis_url = "redis://file:6379/1"\nclaim_ttl = 5.0\n')
    from_file = load_config(Overrides(config=str(path)), {})
    assert (from_file.coordination.redis_url, from_file.coordination.claim_ttl) == (
        "redis://file:6379/1",
        5.0,
    )
    env = {"STATEWAY_REDIS_URL": "redis://env:6379/0", "STATEWAY_REDIS_KEY_PREFIX": "gw1:"}
    from_env = load_config(Overrides(config=str(path)), env)
    assert from_env.coordination.redis_url == "redis://env:6379/0"
    assert from_env.coordination.key_prefix == "gw1:"
    assert from_env.coordination.claim_ttl == 5.0
    results, signals = build_coordination(from_env.coordination)
    assert isinstance(results, RedisCommandResults)
    assert isinstance(signals, RedisCancelSignals)
    await results.aclose()
    await signals.aclose()


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('redis_url = "http://x"', "redis_url: Value error, must start with redis://"),
        # Each one redis-py would refuse as serving opened it, or read as another database.
        ('redis_url = "redis://:hunter22@h:99999/0"', "redis_url: Value error, Port out of"),
        ('redis_url = "redis://h:6379/x"', "redis_url: Value error, the database"),
        ('redis_url = "redis://h:6379/1/2"', "redis_url: Value error, the database"),
        ('redis_url = "unix:///run/redis.sock?db=x"', "redis_url: Value error, Invalid value"),
        ("max_results = 0", "max_results"),
        ("max_result_bytes = 0", "max_result_bytes"),
        ("claim_ttl = 0", "claim_ttl"),
        ("lease_timeout = 0", "lease_timeout"),
        ('key_prefix = ""', "key_prefix"),
        ("bogus = 1", "bogus"),
    ],
)
def test_bad_coordination_settings_are_refused(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(f"[coordination]\n{text}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(Overrides(config=str(path)), {})
    assert fragment in str(caught.value)
    assert "hunter22" not in str(caught.value)


async def test_leases_fan_out_and_rate_limits_follow_the_coordination(tmp_path: Path) -> None:
    alone = load_config(Overrides(), {})
    assert alone.coordination.lease_timeout == 10.0
    assert build_fanout(alone.coordination) is None
    assert build_limits(alone) is None  # no limit set

    path = tmp_path / "c.toml"
    path.write_text(
        "[coordination]\nlease_timeout = 3.5\n[rate_limits]\nrequests_per_minute = 600\n"
    )
    limited = load_config(Overrides(config=str(path)), {})
    assert limited.coordination.lease_timeout == 3.5
    assert (limited.rate_limits.requests_per_minute, limited.rate_limits.tokens_per_minute) == (
        600,
        None,
    )
    limits = build_limits(limited)
    assert limits is not None
    assert isinstance(limits._buckets, MemoryTokenBuckets)

    env = {
        "STATEWAY_REDIS_URL": "redis://env:6379/0",
        "STATEWAY_LEASE_TIMEOUT": "1",
        "STATEWAY_REQUESTS_PER_MINUTE": "5",
        "STATEWAY_TOKENS_PER_MINUTE": "1000",
    }
    shared = load_config(Overrides(config=str(path)), env)
    assert shared.coordination.lease_timeout == 1.0
    assert (shared.rate_limits.requests_per_minute, shared.rate_limits.tokens_per_minute) == (
        5,
        1000,
    )
    fanout = build_fanout(shared.coordination)
    assert isinstance(fanout, RedisEventFanout)
    limits = build_limits(shared)
    assert limits is not None
    assert isinstance(limits._buckets, RedisTokenBuckets)
    await fanout.aclose()
    await limits.aclose()


async def test_concurrent_requests_are_slots_in_process_or_in_redis(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[rate_limits]\nconcurrent_requests = 4\n")
    alone = load_config(Overrides(config=str(path)), {})
    assert alone.rate_limits.concurrent_requests == 4
    limits = build_limits(alone)  # the only limit set
    assert limits is not None
    assert isinstance(limits._slots, MemoryRequestSlots)
    assert limits._concurrent == 4

    env = {"STATEWAY_REDIS_URL": "redis://env:6379/0", "STATEWAY_CONCURRENT_REQUESTS": "2"}
    shared = build_limits(load_config(Overrides(), env))
    assert shared is not None
    assert isinstance(shared._slots, RedisRequestSlots)
    assert shared._concurrent == 2
    await shared.aclose()
    await limits.aclose()


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("concurrent_requests = 0", "concurrent_requests"),
        ("requests_per_minute = 0", "requests_per_minute"),
        ("tokens_per_minute = -1", "tokens_per_minute"),
        ("burst = 1", "burst"),
    ],
)
def test_bad_rate_limits_are_refused(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(f"[rate_limits]\n{text}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(Overrides(config=str(path)), {})
    assert fragment in str(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        "redis://h",
        "redis://h:6379/",
        "redis://:pw@h:6379/15",
        "rediss://h:6380/2?ssl_cert_reqs=none",
        "unix:///run/redis.sock?db=3",
    ],
)
def test_usable_redis_urls_are_taken(tmp_path: Path, url: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(f'[coordination]\nredis_url = "{url}"\n')
    assert load_config(Overrides(config=str(path)), {}).coordination.redis_url == url


async def test_every_coordination_setting_reaches_the_adapter_it_bounds(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        "[coordination]\nmax_results = 7\nresult_ttl = 60.0\nclaim_ttl = 5.0\n"
        "max_result_bytes = 900\nredis_timeout = 1.5\n"
        "[rate_limits]\nrequests_per_minute = 5\ntokens_per_minute = 1000\n"
        "concurrent_requests = 2\n"
    )
    alone = load_config(Overrides(config=str(path)), {})
    memory, _ = build_coordination(alone.coordination)
    assert isinstance(memory, MemoryCommandResults)
    assert (memory._max, memory._ttl, memory._max_bytes) == (7, 60.0, 900)

    env = {"STATEWAY_REDIS_URL": "redis://env:6379/0", "STATEWAY_REDIS_KEY_PREFIX": "gw1:"}
    shared = load_config(Overrides(config=str(path)), env)
    results, signals = build_coordination(shared.coordination)
    fanout = build_fanout(shared.coordination)
    limits = build_limits(shared)
    assert isinstance(results, RedisCommandResults)
    assert isinstance(signals, RedisCancelSignals)
    assert isinstance(fanout, RedisEventFanout)
    assert limits is not None
    buckets, slots = limits._buckets, limits._slots
    assert isinstance(buckets, RedisTokenBuckets)
    assert isinstance(slots, RedisRequestSlots)
    try:
        assert (results._cmd, results._claim_ms, results._result_ms) == ("gw1:cmd:", 5000, 60000)
        assert results._bounds == (7, 900)
        assert (signals._channel, fanout._standing) == ("gw1:cancel", "gw1:events")
        assert (buckets._prefix, slots._prefix) == ("gw1:", "gw1:")
        assert (limits._requests, limits._tokens, limits._concurrent) == (5, 1000, 2)
        # One outage for both limits, named and probing as the buckets' own would.
        assert slots._outage is buckets._outage
        assert buckets._outage._what == "rate limits"
        assert buckets._outage._probe == buckets._redis.ping
        clients = (results._redis, signals._redis, fanout._redis, buckets._redis, slots._redis)
        for client in clients:
            pool = client.connection_pool.connection_kwargs
            assert (pool["socket_timeout"], pool["socket_connect_timeout"]) == (1.5, 1.5)
    finally:
        for adapter in (results, signals, fanout, limits):
            await adapter.aclose()
