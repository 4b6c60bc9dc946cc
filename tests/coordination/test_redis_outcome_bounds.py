"""The Redis adapter's bound on what each tenant holds: past ``max_results`` outcomes or
``max_bytes`` of answers, the tenant's oldest go, never another tenant's, however many
processes share the Redis; claims are never dropped; the tenant's record of its outcomes
forgets those expired. Against the real Redis server."""

from __future__ import annotations

import hashlib
import uuid

import pytest

from stateway.coordination.redis import RedisCommandResults, connect
from stateway.core.coordination import CommandKey, CommandResults, Outcome

pytestmark = pytest.mark.redis


def _command(prefix: str, key: CommandKey) -> str:
    return prefix + "cmd:" + hashlib.sha256(str(key).encode()).hexdigest()


async def _remember(results: CommandResults, key: CommandKey, body: bytes) -> None:
    assert await results.claim(key, "f") is None
    await results.complete(key, Outcome("f", body))


@pytest.mark.parametrize(("bound", "size"), [({"max_results": 4}, 1), ({"max_bytes": 100}, 30)])
async def test_a_tenants_flood_pushes_out_its_own_oldest_redis_outcomes_only(
    redis_url: str, bound: dict[str, int], size: int
) -> None:
    """Past ``max_results`` outcomes or ``max_bytes`` of answers held by one tenant in
    Redis, that tenant's oldest go: another tenant's many cheap keyed requests do not fill
    Redis, nor push out (through its eviction policy) a tenant's outcome."""
    prefix = f"test:{uuid.uuid4().hex}:"
    results = RedisCommandResults(connect(redis_url), prefix, **bound)
    probe = connect(redis_url)
    try:
        theirs = CommandKey("alice", "key_a", "create")
        await _remember(results, theirs, b"a" * 40)
        flood = [CommandKey("bob", "key_b", str(n)) for n in range(10)]
        for key in flood:
            await _remember(results, key, b"b" * size)

        assert await results.claim(theirs, "f") == Outcome("f", b"a" * 40)
        assert await results.claim(flood[-1], "f") == Outcome("f", b"b" * size)
        kept = [await probe.exists(_command(prefix, key)) for key in flood]
        assert kept == ([0] * 7 + [1] * 3 if size > 1 else [0] * 6 + [1] * 4)
        assert await results.claim(flood[0], "f") is None  # bob's oldest went: runs again
        await results.release(flood[0])
    finally:
        await results.aclose()
        await probe.aclose()


async def test_redis_keeps_the_newest_outcome_whatever_its_size(redis_url: str) -> None:
    prefix = f"test:{uuid.uuid4().hex}:"
    results = RedisCommandResults(connect(redis_url), prefix, max_bytes=100)
    try:
        first, big = CommandKey("t", "p", "1"), CommandKey("t", "p", "2")
        await _remember(results, first, b"x" * 40)
        await _remember(results, big, b"z" * 500)

        assert await results.claim(big, "f") == Outcome("f", b"z" * 500)
        assert await results.claim(first, "f") is None
        await results.release(first)
    finally:
        await results.aclose()


async def test_two_processes_sharing_redis_keep_one_bound_per_tenant(redis_url: str) -> None:
    prefix = f"test:{uuid.uuid4().hex}:"
    first = RedisCommandResults(connect(redis_url), prefix, max_results=3)
    second = RedisCommandResults(connect(redis_url), prefix, max_results=3)
    probe = connect(redis_url)
    try:
        keys = [CommandKey("bob", "key_b", str(n)) for n in range(8)]
        for n, key in enumerate(keys):
            await _remember((first, second)[n % 2], key, str(n).encode())

        assert len(await probe.keys(prefix + "cmd:*")) == 3
        assert [await second.claim(key, "f") for key in keys[-3:]] == [
            Outcome("f", b"5"),
            Outcome("f", b"6"),
            Outcome("f", b"7"),
        ]
        assert await first.claim(keys[4], "f") is None
        await first.release(keys[4])
    finally:
        await first.aclose()
        await second.aclose()
        await probe.aclose()


async def test_a_running_claim_is_not_evicted_by_its_expired_outcome(redis_url: str) -> None:
    """An outcome that expired leaves its tenant's record of it behind; the command then
    runs again under a claim. Trimming that stale record leaves the claim alone, so the
    run's retries still wait for it rather than run it a second time."""
    prefix = f"test:{uuid.uuid4().hex}:"
    results = RedisCommandResults(connect(redis_url), prefix, max_results=2)
    probe = connect(redis_url)
    try:
        running = CommandKey("bob", "key_b", "running")
        await _remember(results, running, b"first")
        await probe.delete(_command(prefix, running))  # its outcome expired
        assert await results.claim(running, "f") is None  # runs again, claimed
        for n in range(3):  # past the bound: the stale record is the oldest
            await _remember(results, CommandKey("bob", "key_b", str(n)), b"x")

        assert (await probe.get(_command(prefix, running)) or b"")[:1] == b"p"
        await results.complete(running, Outcome("f", b"second"))
        assert await results.claim(running, "f") == Outcome("f", b"second")
    finally:
        await results.aclose()
        await probe.aclose()


async def test_a_tenants_record_of_expired_outcomes_is_bounded_and_expires(
    redis_url: str,
) -> None:
    """Outcomes that expired are forgotten in the tenant's record too: counted out oldest
    first, and the whole record expires with its newest outcome."""
    prefix = f"test:{uuid.uuid4().hex}:"
    results = RedisCommandResults(connect(redis_url), prefix, max_results=3, result_ttl=100)
    probe = connect(redis_url)
    try:
        for n in range(10):
            key = CommandKey("bob", "key_b", str(n))
            await _remember(results, key, b"x")
            await probe.delete(_command(prefix, key))  # expired

        digest = hashlib.sha256(b"bob").hexdigest()
        order, sizes = f"{prefix}outcomes:{digest}", f"{prefix}outcome-bytes:{digest}"
        records = {k for k in await probe.keys(prefix + "*") if b":cmd:" not in k}
        assert records == {order.encode(), sizes.encode()}, "the documented keys"
        assert (await probe.type(order), await probe.type(sizes)) == (b"zset", b"hash")
        for record in (order, sizes):
            assert 99_000 < await probe.pttl(record) <= 100_000
        assert await probe.zcard(order) == 3
    finally:
        await results.aclose()
        await probe.aclose()


async def test_a_tenants_record_redis_evicted_in_part_mends_itself(redis_url: str) -> None:
    """Redis's eviction policy may drop either key of a tenant's record: the newest
    outcome is kept still, and the bytes counted start again from the outcomes known."""
    prefix = f"test:{uuid.uuid4().hex}:"
    results = RedisCommandResults(connect(redis_url), prefix, max_results=2, max_bytes=100)
    probe = connect(redis_url)
    order, sizes = results._outcomes("bob")
    keys = [CommandKey("bob", "key_b", str(n)) for n in range(6)]
    try:
        for key in keys[:2]:
            await _remember(results, key, b"x" * 40)
        await probe.delete(sizes)  # the order of the outcomes starts again
        await _remember(results, keys[2], b"x" * 40)
        assert await results.claim(keys[2], "f") == Outcome("f", b"x" * 40)

        await _remember(results, keys[3], b"y" * 40)
        await probe.delete(order)  # their bytes are counted still
        await _remember(results, keys[4], b"y" * 40)
        await _remember(results, keys[5], b"y" * 40)  # 80 bytes: both kept
        assert await results.claim(keys[4], "f") == Outcome("f", b"y" * 40)
        assert await results.claim(keys[5], "f") == Outcome("f", b"y" * 40)
    finally:
        await results.aclose()
        await probe.aclose()
